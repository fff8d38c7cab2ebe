"""Which nodes' launchers stopped beating: one watcher reads the counters, the others one key.

Every launcher adds to its `alive/<node>` counter once a beat (membership.py). Node 0 of
the round, the watcher, reads every other node's counter once a beat and publishes the
nodes lost in `lost` (a JSON list, written when it changes). Every other node reads
that one key, and node 0's counter once a beat: the store's work is O(N) in all, not
every node reading every counter (N^2). A node that finds node 0 itself lost reads
every counter as node 0 did (the rule is the same: a counter that has not moved for
`lost_after` seconds), so a lost watcher is found, and the nodes it would have named.

"Not moved for `lost_after` seconds" is counted against this node's own counter, read
through the same store: a node is lost when its counter stood still while this node's
own beats went through the store as many times as `lost_after` holds beats. When the
store or the machine is slow for everyone (16 launchers and 32 ranks importing torch on
2 cores: store operations took up to 4.8 s), every counter stands still alike and
nobody is called lost; torch's own keep-alive is only judged at a rendezvous, and
torchrun's job ran on there. A node that truly stopped is found as soon as this node's
beats have gone on for `lost_after`.

A node that finds itself in the published list was given up by the others, wrongly if
it reads the list at all (its launcher starved of CPU, or the network dropped its beats
for longer than `lost_after`): their ranks stop, so it stops its own and says why
(`given_up`), rather than wait on peers that are gone.

The published list is read at the caller's pace (the supervisor's, every 0.5 s): what
node 0 finds reaches the others within that, the counters being looked at no more
often than they can move.
"""

from __future__ import annotations

import json
import threading
from typing import Protocol

WATCHER = 0  # the node that reads every counter
LOST_KEY = "lost"


class Counters(Protocol):
    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def add(self, key: str, amount: int) -> int: ...

    def check(self, keys: list[str]) -> bool: ...


class Connecting(Protocol):
    def clone(self) -> Counters: ...  # the same store over a connection of its own


def alive_key(node: int) -> str:
    return f"alive/{node}"


class Beating:
    """This launcher's own beat: its `alive/<node>` counter, once every `every` seconds, from
    a thread, on a connection of its own (the main thread's reads never delay it)."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, store: Connecting, node: int, every: float) -> None:
        counters = store.clone()
        key = alive_key(node)

        def beat() -> None:
            while not self._stop.wait(every):
                try:
                    counters.add(key, 1)
                except Exception:
                    return  # the store is gone: the watchers will say so

        counters.add(key, 1)
        self._thread = threading.Thread(target=beat, name="safelaunch-node-alive", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


class Liveness:
    """This node's view of which other nodes are lost (see the module docstring)."""

    def __init__(
        self, store: Counters, node: int, nodes: int, lost_after: float, beat_every: float
    ) -> None:
        self.store = store
        self.node = node
        self.nodes = nodes
        self.lost_after = lost_after
        self._beat_every = beat_every
        # node -> (its counter, when it last moved, this node's own counter then)
        self._seen: dict[int, tuple[int, float, int]] = {}
        self._beats_needed = max(2, round(lost_after / beat_every)) if beat_every > 0 else 2
        self._next_look = 0.0
        self._found: list[int] = []  # from this node's own look at the counters
        self._published: list[int] | None = None  # what the watcher last wrote (watcher only)
        # This node is in the watcher's list: its beats stood still there (a launcher starved
        # of CPU for longer than lost_after looks lost), and the others stop their ranks.
        self.given_up = False

    def serves(self, store: Counters, node: int, nodes: int, lost_after: float) -> bool:
        """Still the view of this round (an elastic job's next round has its own)."""
        return (self.store, self.node, self.nodes, self.lost_after) == (
            store,
            node,
            nodes,
            lost_after,
        )

    def lost(self, now: float) -> list[int]:
        """The other nodes lost as far as this node knows now."""
        if now >= self._next_look:  # the counters move once a beat: no use looking more often
            self._next_look = now + self._beat_every
            watched = range(self.nodes) if self.node == WATCHER else [WATCHER]
            self._found = self._look(watched, now)
            if self.node != WATCHER and WATCHER in self._found:
                self._found = self._look(range(self.nodes), now)  # the fallback: see above
        if self.node == WATCHER:
            self._publish(self._found)
            return list(self._found)
        if WATCHER in self._found:
            return list(self._found)
        published = set(self._read_published())
        self.given_up = self.node in published
        return sorted(published - {self.node})

    def _look(self, nodes: range | list[int], now: float) -> list[int]:
        own = self.store.add(alive_key(self.node), 0)
        lost = []
        for node in nodes:
            if node == self.node:
                continue
            count = self.store.add(alive_key(node), 0)
            last = self._seen.get(node)
            if last is None or last[0] != count:
                self._seen[node] = (count, now, own)
            elif now - last[1] > self.lost_after and own - last[2] >= self._beats_needed:
                lost.append(node)
        return lost

    def _publish(self, lost: list[int]) -> None:
        if lost != (self._published or []):
            self.store.set(LOST_KEY, json.dumps(lost))
            self._published = list(lost)

    def _read_published(self) -> list[int]:
        if not self.store.check([LOST_KEY]):
            return []
        try:
            found = json.loads(self.store.get(LOST_KEY).decode())
        except ValueError:
            return []
        if not isinstance(found, list):
            return []
        return [n for n in found if isinstance(n, int) and 0 <= n < self.nodes]
