"""This node's membership of a multi-node job: torch's rendezvous, then safelaunch's keys.

Imported only for --nnodes > 1 (its torch import is lazier still: torchstore.py).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from safelaunch.errors import RendezvousError
from safelaunch.rendezvous import Placement
from safelaunch.rendezvous.rounds import Round
from safelaunch.rendezvous.stops import NodeStop, StopKind, from_json
from safelaunch.vocab import StrEnum

POLL = 0.1  # seconds between looks at the store while waiting
LOOK_EVERY = 0.5  # seconds between per-node looks (who is missing, who is lost) in a gather


class KeyValue(Protocol):
    """The few store operations used here (torchstore.TextStore over torch's TCPStore)."""

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def add(self, key: str, amount: int) -> int: ...

    def check(self, keys: list[str]) -> bool: ...


class StartVote(StrEnum):
    """Each node's word on whether it starts the next attempt."""

    GO = "go"
    STOP = "stop"


@dataclass(frozen=True, slots=True, kw_only=True)
class Joined:
    """What torch's rendezvous returned."""

    node: int
    nodes: int
    master_addr: str
    master_port: int
    shutdown: Callable[[], Any]
    # the next round of the same rendezvous: (joined, store), torchstore.TextStore's
    next_round: Callable[[], tuple[Joined, KeyValue]] | None = None
    # c10d: how many nodes wait in torch's rendezvous for the next round (elastic scale-up)
    waiting: Callable[[], int] | None = None


class Waiting(Protocol):
    """Polled while this node waits for other nodes that are alive but not done."""

    def poll(self, missing: list[int], waited: float) -> bool:
        """True to stop waiting (a signal came); may say whom this node waits for."""


class Membership:
    """This node's view of the job's nodes, over safelaunch's keys in torch's store."""

    def __init__(
        self,
        store: KeyValue,
        joined: Joined,
        placement: Placement,
        lost_after: float,
        beat_every: float,
    ) -> None:
        self.placement = placement
        self._store = store
        self._joined = joined
        self.lost_after = lost_after
        self._beat_every = beat_every
        self._seen: dict[int, tuple[int, float]] = {}  # node -> (counter, when it last changed)
        self._stop_beating = threading.Event()
        self._beater: threading.Thread | None = None
        self._workers_store: Any = None  # node 0: the TCPStore of the current attempt's ranks
        self.round: Round | None = None  # who left and joined, the job's count (rounds.py)

    # --- liveness -------------------------------------------------------------

    def start_beating(self) -> None:
        """A thread that says, every few seconds, that this node's launcher lives."""
        store = self._store
        key = f"alive/{self.placement.node}"

        def beat() -> None:
            while not self._stop_beating.wait(self._beat_every):
                try:
                    store.add(key, 1)
                except Exception:
                    return  # the store is gone: the watchers will say so

        store.add(key, 1)
        self._beater = threading.Thread(target=beat, name="safelaunch-node-alive", daemon=True)
        self._beater.start()

    def lost_nodes(self, now: float) -> list[int]:
        """Nodes whose liveness counter has not moved for `lost_after` seconds."""
        lost = []
        for node in range(self.placement.nodes):
            if node == self.placement.node:
                continue
            count = self._store.add(f"alive/{node}", 0)
            last = self._seen.get(node)
            if last is None or last[0] != count:
                self._seen[node] = (count, now)
            elif now - last[1] > self.lost_after:
                lost.append(node)
        return lost

    @property
    def beat_every(self) -> float:
        return self._beat_every

    def describe(self, node: int) -> str:
        return f"node {node} ({self.placement.hosts[node]})"

    # --- exchanges -----------------------------------------------------------

    def wait_for(self, keys: list[str], timeout: float) -> bool:
        """Poll until every key exists; False at the deadline."""
        deadline = time.monotonic() + timeout
        while not self._store.check(keys):
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL)
        return True

    def start_attempt(self, attempt: int, go: bool, timeout: float) -> tuple[list[int], list[int]]:
        """Every node says whether it starts `attempt`: (nodes that stop, nodes missing)."""
        try:
            values = self.gather(
                f"attempt/{attempt}/start", StartVote.GO if go else StartVote.STOP, timeout
            )
        except Exception:
            others = [n for n in range(self.placement.nodes) if n != self.placement.node]
            return [], others
        stopping = [n for n, v in enumerate(values) if v == StartVote.STOP]
        missing = [n for n, v in enumerate(values) if v is None]
        return stopping, missing

    def gather(
        self, name: str, mine: str, timeout: float, until: Waiting | None = None
    ) -> list[str | None]:
        """Every node's value for `name`; None for a node that gave none in time.

        A node whose liveness counter stopped is not waited for: its launcher is gone.
        With `until`, a node whose launcher lives is waited for past `timeout`: its
        ranks still run (see end_attempt).
        """
        keys = [f"{name}/{node}" for node in range(self.placement.nodes)]
        self._store.set(keys[self.placement.node], mine)
        # One counter the waiting nodes poll: one operation per look, not one per node (a
        # per-key look from every node, ten times a second, grew with the square of nodes).
        arrived = f"{name}/arrived"
        self._store.add(arrived, 1)
        started = time.monotonic()
        deadline = started + timeout
        missing: set[int] = set(range(self.placement.nodes))
        next_look = started
        while True:
            now = time.monotonic()
            if self._store.add(arrived, 0) >= len(keys) and self._store.check(keys):
                missing = set()
                break
            if now >= next_look:  # who is missing, and lost: twice a second
                next_look = now + LOOK_EVERY
                missing = {n for n, key in enumerate(keys) if not self._store.check([key])}
                if not missing:
                    break
                if self._beater is not None and missing <= set(self.lost_nodes(now)):
                    break
            if now > deadline and (until is None or self._beater is None):
                break
            if until is not None and until.poll(sorted(missing), now - started):
                break
            time.sleep(POLL)
        missing = {n for n in missing if not self._store.check([keys[n]])}  # late arrivals
        return [
            None if n in missing else self._store.get(key).decode() for n, key in enumerate(keys)
        ]

    def barrier(self, name: str, timeout: float) -> list[int]:
        """Wait for every node to reach `name`; the nodes that did not, in time."""
        values = self.gather(name, "1", timeout)
        return [node for node, value in enumerate(values) if value is None]

    # --- within an attempt ----------------------------------------------------

    def announce_stop(self, attempt: int, stop: NodeStop) -> None:
        """Tell the other nodes to stop this attempt (first announcement wins)."""
        if self._store.add(f"attempt/{attempt}/stops", 1) == 1:
            self._store.set(f"attempt/{attempt}/stop", stop.to_json())

    def stop_requested(self, attempt: int) -> NodeStop | None:
        """Another node's announcement, if one was made."""
        key = f"attempt/{attempt}/stop"
        if self._store.check([key]):
            return from_json(self._store.get(key).decode())
        return None

    def exchange_live(self, attempt: int, snapshot: str) -> dict[int, str]:
        """Publish this node's live snapshot; every other node's latest one, by node.

        One small JSON per node, replaced every second or two: each launcher writes what
        it pulls into its own run directory, so `status` on any node shows every node.
        """
        prefix = f"attempt/{attempt}/live"
        self._store.set(f"{prefix}/{self.placement.node}", snapshot)
        others = {}
        for node in range(self.placement.nodes):
            key = f"{prefix}/{node}"
            if node != self.placement.node and self._store.check([key]):
                others[node] = self._store.get(key).decode()
        return others

    def watch(self, attempt: int) -> NodeWatch:
        """What the supervisor polls during an attempt."""
        return NodeWatch(self, attempt)

    def end_attempt(
        self, attempt: int, summary: Mapping[str, Any], timeout: float, until: Waiting
    ) -> list[Any]:
        """Every node's end-of-attempt summary; None for a node that is lost or stopped waiting.

        A node whose ranks finished early (typical: rank 0 alone evaluates or saves at
        the end) waits for the others as long as their launchers live: those still run
        ranks, and the verdict is the job's. What bounds the wait is on the other nodes:
        their --hang-timeout ends ranks that stop progressing, and a launcher that stops
        beating is lost after keep_alive_interval x keep_alive_max_attempt. `until` may
        end it early (a signal here). `timeout` only applies when liveness is unknown.
        """
        try:
            values = self.gather(f"attempt/{attempt}/end", json.dumps(summary), timeout, until)
        except Exception:  # the store itself is gone: so is the node that hosted it
            values = [None] * self.placement.nodes
            values[self.placement.node] = json.dumps(summary)
        return [json.loads(v) if v is not None else None for v in values]

    def first_stop(self, attempt: int) -> NodeStop | None:
        """The first node's announcement in this attempt, if the store still answers."""
        try:
            return self.stop_requested(attempt)
        except Exception:
            return None

    def placement_for(self, attempt: int, timeout: float) -> Placement:
        """This node's placement with the attempt's own workers' store.

        Node 0 serves a fresh TCPStore for each attempt (torch's workers would find the
        last attempt's Gloo addresses in a reused one) and publishes its port.
        """
        from safelaunch.rendezvous import torchstore

        key = f"attempt/{attempt}/workers_store"
        if self.placement.node == 0:
            self._workers_store = None  # the previous attempt's goes away
            self._workers_store, port = torchstore.serve_workers_store(self.placement.master_addr)
            self._store.set(key, str(port))
        elif not self.wait_for([key], timeout):
            raise RendezvousError(
                f"node 0 published no workers' store for attempt {attempt} in {timeout:g} s",
                "check node 0's console",
            )
        port = int(self._store.get(key).decode())
        return replace(self.placement, master_port=port)

    def take(self, fresh: Membership) -> None:
        """Become `fresh`, the next round's membership (elastic): the old round's liveness
        thread stops, its workers' store goes; the launch keeps this one object."""
        self._stop_beating.set()
        self._workers_store = None
        self.placement, self._store, self._joined = fresh.placement, fresh._store, fresh._joined
        self.lost_after, self._beat_every, self._seen = fresh.lost_after, fresh._beat_every, {}
        self.round = fresh.round
        self._stop_beating, self._beater = fresh._stop_beating, fresh._beater

    def nodes_waiting(self) -> int:
        """Nodes waiting in torch's rendezvous to join the next round (0 without c10d)."""
        return self._joined.waiting() if self._joined.waiting is not None else 0

    def next_round(self) -> tuple[Joined, KeyValue]:
        """Torch's rendezvous again (elastic): the nodes that remain and those that wait."""
        if self._joined.next_round is None:
            raise RendezvousError("this rendezvous has no next round", "use --rdzv-backend c10d")
        self._stop_beating.set()  # a node left the round: it no longer counts as alive in it
        return self._joined.next_round()

    def leave(self, timeout: float) -> None:
        """Close in step: nobody's last read may find the store's host already gone."""
        with contextlib.suppress(Exception):
            self.barrier("leave", timeout)
        with contextlib.suppress(Exception):
            self._joined.shutdown()
        with contextlib.suppress(Exception):
            self.barrier("left", timeout)
        self._stop_beating.set()
        self._workers_store = None
        write_counts = getattr(self._store, "write_counts", None)  # torchstore.TextStore's
        if write_counts is not None:
            with contextlib.suppress(OSError):
                write_counts(self.placement.node)


class NodeWatch:
    """Polled by the supervisor each tick: has another node stopped, or vanished?"""

    def __init__(self, membership: Membership, attempt: int, every: float = 0.5) -> None:
        self._membership = membership
        self._attempt = attempt
        self._every = every
        self._next = 0.0
        # The liveness counters move once a beat: a look at every node's more often than
        # that reads nothing new, and each look is one store operation per node.
        self._look_every = max(every, membership.beat_every)
        self._next_look = 0.0
        self.announced = False

    def poll(self) -> NodeStop | None:
        """Why this node's ranks must stop now, or None."""
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self._every
        membership = self._membership
        try:
            stop = membership.stop_requested(self._attempt)
            if stop is not None:
                return stop
            lost = []
            if now >= self._next_look:
                self._next_look = now + self._look_every
                lost = membership.lost_nodes(now)
        except Exception as exc:
            return NodeStop(
                kind=StopKind.STORE_LOST,
                node=None,
                attempt=self._attempt,
                text=f"lost contact with the rendezvous store ({type(exc).__name__}: {exc})",
            )
        if lost:
            names = ", ".join(membership.describe(n) for n in lost)
            return NodeStop(
                kind=StopKind.NODES_LOST,
                node=None,
                attempt=self._attempt,
                text=f"{names} stopped answering for more than {membership.lost_after:g} s "
                "(its launcher died, or the network between the nodes failed)",
            )
        return None

    def share(self, snapshot: str) -> dict[int, str]:
        """This node's live snapshot (for `safelaunch status`) out, the others' latest in.

        A store that stopped answering leaves status with the last copies it got.
        """
        try:
            return self._membership.exchange_live(self._attempt, snapshot)
        except Exception:
            return {}

    def announce(self, stop: NodeStop) -> None:
        """This node stops the attempt: tell the others (once)."""
        if self.announced:
            return
        self.announced = True
        with contextlib.suppress(Exception):  # else the others find this node silent
            self._membership.announce_stop(self._attempt, stop)
