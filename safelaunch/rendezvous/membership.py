"""This node's membership of a multi-node job: torch's rendezvous, then safelaunch's keys.

Imported only for --nnodes > 1 (its torch import is lazier still: torchstore.py).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from safelaunch.errors import RendezvousError
from safelaunch.rendezvous import Placement
from safelaunch.rendezvous.keyvalue import Joined, KeyValue
from safelaunch.rendezvous.liveness import WATCHER, Beating, Liveness
from safelaunch.rendezvous.rounds import Round
from safelaunch.rendezvous.stops import NodeStop, from_json
from safelaunch.vocab import StrEnum

if TYPE_CHECKING:
    from safelaunch.rendezvous.nodewatch import NodeWatch

__all__ = ["Joined", "KeyValue", "Membership", "StartVote", "Waiting"]

POLL = 0.1  # seconds of one wait in the store (then signals, who is lost, the deadline)
LOOK_EVERY = 0.5  # seconds between per-node looks (who is missing, who is lost) in a gather
NAMED = 16  # at most this many nodes named in what node 0 publishes of whom it waits for


class StartVote(StrEnum):
    """Each node's word on whether it starts the next attempt."""

    GO = "go"
    STOP = "stop"


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
        self._liveness: Liveness | None = None
        self._arrived: set[str] = set()  # the gathers this node has arrived at
        self._beating = Beating()
        self._workers_store: Any = None  # node 0: the TCPStore of the current attempt's ranks
        self._workers_for: int | None = None  # the attempt it serves
        self._met_for: int | None = None  # the attempt the round's exchange brought all to
        self.round: Round | None = None  # who left and joined, the job's count (rounds.py)

    # --- liveness -------------------------------------------------------------

    def start_beating(self) -> None:
        """This node's launcher says it lives, every few seconds (liveness.Beating)."""
        self._beating.start(self._store, self.placement.node, self._beat_every)

    def stop_beating(self) -> None:
        self._beating.stop()

    def lost_nodes(self, now: float) -> list[int]:
        """Nodes whose liveness counter has not moved for `lost_after` seconds: node 0 reads
        the counters and publishes the list, the others read it (liveness.py)."""
        return self._view().lost(now)

    def given_up(self) -> bool:
        """Node 0 published this node as lost at its last look (liveness.py): the others stop."""
        return self._liveness is not None and self._liveness.given_up

    def _view(self) -> Liveness:
        """This round's liveness view (a next round, elastic, has its own store and nodes)."""
        place, view = self.placement, self._liveness
        if view is None or not view.serves(self._store, place.node, place.nodes, self.lost_after):
            view = Liveness(self._store, place.node, place.nodes, self.lost_after, self._beat_every)
            self._liveness = view
        return view

    @property
    def judges(self) -> bool:
        """This node judges the job and publishes the verdict (node 0 of the round)."""
        return self.placement.node == WATCHER

    @property
    def beat_every(self) -> float:
        return self._beat_every

    @property
    def store(self) -> KeyValue:
        return self._store

    def describe(self, node: int) -> str:
        return f"node {node} ({self.placement.hosts[node]})"

    # --- exchanges -----------------------------------------------------------

    def wait_for(self, keys: list[str], timeout: float) -> bool:
        """Poll until every key exists; False at the deadline."""
        deadline = time.monotonic() + timeout
        while not self._store.wait(keys, POLL):  # the store wakes this node when they are
            if time.monotonic() > deadline:
                return False
        return True

    def met_for(self, attempt: int) -> None:
        """Every node of the round just met in its exchange, for `attempt` (joining.py)."""
        self._met_for = attempt

    def start_attempt(self, attempt: int, go: bool, timeout: float) -> tuple[list[int], list[int]]:
        """Every node says whether it starts `attempt`: (nodes that stop, nodes missing).

        Not again for the attempt the round's exchange just met for: every node of the
        round is there and goes (a node with a signal pending does not join the round).
        A second barrier there cost every node the slowest one's way to it (0.2-0.7 s of
        launch to first step at 2-8 loaded launchers; bench/scale.py --what start).
        """
        if go and attempt == self._met_for:
            self._met_for = None
            return [], []
        name = f"attempt/{attempt}/start"
        try:
            if not go:  # counted before arriving: whoever sees every node arrived sees it
                self._store.add(f"{name}/stopping", 1)
            keys = self._arrive(name, StartVote.GO if go else StartVote.STOP)
            missing = self._await(name, keys, timeout, None)
            if self._store.add(f"{name}/stopping", 0) == 0:
                return [], sorted(missing)
            values = self._values(keys, missing)
        except Exception:
            others = [n for n in range(self.placement.nodes) if n != self.placement.node]
            return [], others
        stopping = [n for n, v in enumerate(values) if v == StartVote.STOP]
        return stopping, sorted(missing)

    def gather(
        self, name: str, mine: str, timeout: float, until: Waiting | None = None
    ) -> list[str | None]:
        """Every node's value for `name`; None for a node that gave none in time.

        A node whose liveness counter stopped is not waited for: its launcher is gone.
        With `until`, a node whose launcher lives is waited for past `timeout`: its
        ranks still run (see end_attempt).
        """
        keys = self._arrive(name, mine)
        return self._values(keys, self._await(name, keys, timeout, until))

    def _arrive(self, name: str, mine: str) -> list[str]:
        """This node's value for `name` out, counted once (a fallback may arrive again)."""
        keys = [f"{name}/{node}" for node in range(self.placement.nodes)]
        self._store.set(keys[self.placement.node], mine)
        if name not in self._arrived:
            self._arrived.add(name)
            if self._store.add(f"{name}/arrived", 1) == len(keys):
                self._store.set(f"{name}/all", "1")  # the last one in wakes the others
        return keys

    def _await(self, name: str, keys: list[str], timeout: float, until: Waiting | None) -> set[int]:
        """Until every node arrived at `name`: the nodes that did not (lost, or late).

        One key waited on, set by the last node in (the store wakes the waiters: no
        polling delay), not every node's key (that grew with the square of nodes); a
        node's own key is looked at only for `until` (whom it waits for) and for the
        nodes found lost (is every missing node a lost one?).
        """
        arrived = f"{name}/arrived"
        started = time.monotonic()
        deadline = started + timeout
        missing = list(range(self.placement.nodes))
        next_look = started
        while True:
            if self._store.wait([f"{name}/all"], POLL):  # at most POLL: signals, looks
                return set()
            now = time.monotonic()
            if now >= next_look:  # who is missing, and lost: twice a second
                next_look = now + LOOK_EVERY
                if until is not None:
                    missing = [n for n, key in enumerate(keys) if not self._store.check([key])]
                    if not missing:
                        return set()
                if self._beating.started and self._all_missing_lost(arrived, keys, now):
                    break
            if now > deadline and (until is None or not self._beating.started):
                break
            if until is not None and until.poll(missing, now - started):
                break
        return {n for n, key in enumerate(keys) if not self._store.check([key])}  # late arrivals

    def _all_missing_lost(self, arrived: str, keys: list[str], now: float) -> bool:
        lost = self.lost_nodes(now)
        if not lost:
            return False
        absent = len(keys) - self._store.add(arrived, 0)
        return sum(not self._store.check([keys[n]]) for n in lost) >= absent

    def _values(self, keys: list[str], missing: set[int]) -> list[str | None]:
        return [
            None if n in missing else self._store.get(key).decode() for n, key in enumerate(keys)
        ]

    def barrier(self, name: str, timeout: float) -> list[int]:
        """Wait for every node to reach `name`; the nodes that did not, in time."""
        return sorted(self._await(name, self._arrive(name, "1"), timeout, None))

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

    def watch(self, attempt: int) -> NodeWatch:
        """What the supervisor polls during an attempt."""
        from safelaunch.rendezvous.nodewatch import NodeWatch

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
        Node 0 publishes whom it waits for (the others say it: await_verdict).
        """
        name = f"attempt/{attempt}/end"
        if self.judges:
            until = _Publishing(self._store, f"{name}/waiting", until)
        try:
            values = self.gather(name, json.dumps(summary), timeout, until)
        except Exception:  # the store itself is gone: so is the node that hosted it
            values = [None] * self.placement.nodes
            values[self.placement.node] = json.dumps(summary)
        return [json.loads(v) if v is not None else None for v in values]

    def await_verdict(
        self, attempt: int, summary: Mapping[str, Any], timeout: float, until: Waiting
    ) -> tuple[str | None, list[int]]:
        """Not node 0: this node's summary out, then node 0's verdict (its JSON text) and
        the nodes node 0 last said it waits for.

        None for the verdict when node 0 gives none: it is lost, it stopped waiting (a
        signal there), or the store failed; the caller then judges from every node's
        summary as node 0 would have (end_attempt). Bounded as end_attempt is.
        """
        name = f"attempt/{attempt}/end"
        verdict, waiting = f"attempt/{attempt}/verdict", f"{name}/waiting"
        missing = [WATCHER]  # until node 0 says more: it is still at its own ranks
        try:
            self._arrive(name, json.dumps(summary))
            started = time.monotonic()
            next_look = started
            while True:
                if self._store.wait([verdict], POLL):  # woken when node 0 publishes it
                    return self._store.get(verdict).decode() or None, missing
                now = time.monotonic()
                if now >= next_look:
                    next_look = now + LOOK_EVERY
                    if WATCHER in self.lost_nodes(now):
                        return None, missing
                    if self._store.check([waiting]):
                        said = json.loads(self._store.get(waiting).decode())
                        missing = [n for n in said if n != self.placement.node] or missing
                if now > started + timeout and not self._beating.started:
                    return None, missing
                if until.poll(missing, now - started):
                    return None, missing
        except Exception:  # the store is gone, or node 0 wrote what this node cannot read
            return None, missing

    def publish_verdict(self, attempt: int, verdict: str | None) -> None:
        """Node 0: the job's verdict for the others (None: none, each judges for itself)."""
        with contextlib.suppress(Exception):  # the others find node 0 silent, and judge
            self._store.set(f"attempt/{attempt}/verdict", verdict or "")

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
        key = f"attempt/{attempt}/workers_store"
        if self.placement.node == 0:
            if self._workers_for != attempt:
                self.serve_workers(attempt)
        elif not self.wait_for([key], timeout):
            raise RendezvousError(
                f"node 0 published no workers' store for attempt {attempt} in {timeout:g} s",
                "check node 0's console",
            )
        port = int(self._store.get(key).decode())
        _write_counts(self._store, self.placement.node, f"attempt{attempt}")
        return replace(self.placement, master_port=port)

    def serve_workers(self, attempt: int) -> None:
        """Node 0: a fresh TCPStore for `attempt`'s workers, its port published. Before the
        roster for the round's first attempt (joining.py): the others find it there."""
        from safelaunch.rendezvous import torchstore

        self._workers_store = None  # the previous attempt's goes away
        self._workers_store, port = torchstore.serve_workers_store(self.placement.master_addr)
        self._workers_for = attempt
        self._store.set(f"attempt/{attempt}/workers_store", str(port))

    def take(self, fresh: Membership) -> None:
        """Become `fresh`, the next round's membership (elastic): the old round's liveness
        thread stops, its workers' store goes; the launch keeps this one object."""
        self._beating.stop()
        self._workers_store, self._workers_for = fresh._workers_store, fresh._workers_for
        self._met_for = fresh._met_for
        self.placement, self._store, self._joined = fresh.placement, fresh._store, fresh._joined
        self.lost_after, self._beat_every = fresh.lost_after, fresh._beat_every
        self._liveness, self._arrived = None, fresh._arrived
        self.round = fresh.round
        self._beating = fresh._beating

    def nodes_waiting(self) -> int:
        """Nodes waiting in torch's rendezvous to join the next round (0 without c10d)."""
        return self._joined.waiting() if self._joined.waiting is not None else 0

    def next_round(self) -> tuple[Joined, KeyValue]:
        """Torch's rendezvous again (elastic): the nodes that remain and those that wait."""
        if self._joined.next_round is None:
            raise RendezvousError("this rendezvous has no next round", "use --rdzv-backend c10d")
        self._beating.stop()  # a node left the round: it no longer counts as alive in it
        return self._joined.next_round()

    def leave(self, timeout: float) -> None:
        """Close in step: nobody's last read may find the store's host already gone."""
        with contextlib.suppress(Exception):
            self.barrier("leave", timeout)
        with contextlib.suppress(Exception):
            self._joined.shutdown()
        with contextlib.suppress(Exception):
            self.barrier("left", timeout)
        self._beating.stop()
        self._workers_store = None
        _write_counts(self._store, self.placement.node)


def _write_counts(store: KeyValue, node: int, phase: str = "") -> None:
    """The store operations so far, for bench/scale.py (torchstore.TextStore's counts)."""
    write_counts = getattr(store, "write_counts", None)
    if write_counts is not None:
        with contextlib.suppress(OSError):
            write_counts(node, phase)


class _Publishing:
    """Node 0's wait: whom it waits for, published when that changes (at most NAMED)."""

    def __init__(self, store: KeyValue, key: str, inner: Waiting | None) -> None:
        self._store, self._key, self._inner = store, key, inner
        self._said: list[int] | None = None

    def poll(self, missing: list[int], waited: float) -> bool:
        if missing != self._said:
            self._said = list(missing)
            self._store.set(self._key, json.dumps(missing[:NAMED]))
        return self._inner is not None and self._inner.poll(missing, waited)
