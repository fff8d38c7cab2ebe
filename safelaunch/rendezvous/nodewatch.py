"""What the supervisor polls during an attempt: has another node stopped, or vanished?

It also carries this node's live snapshot out (and, on node 0, the others' in:
live_exchange.py). Each poll is one look at the stop announcement; the liveness
counters are looked at once a beat (liveness.py).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from safelaunch.rendezvous.live_exchange import Shared, share
from safelaunch.rendezvous.stops import NodeStop, StopKind

if TYPE_CHECKING:
    from safelaunch.rendezvous.membership import Membership


class NodeWatch:
    """Polled by the supervisor each tick: has another node stopped, or vanished?"""

    def __init__(self, membership: Membership, attempt: int, every: float = 0.5) -> None:
        self._membership = membership
        self._attempt = attempt
        self._every = every
        self._next = 0.0
        self.announced = False

    @property
    def pace(self) -> float:
        return self._every

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
            lost = membership.lost_nodes(now)  # the counters: once a beat (liveness.py)
        except Exception as exc:
            return NodeStop(
                kind=StopKind.STORE_LOST,
                node=None,
                attempt=self._attempt,
                text=f"lost contact with the rendezvous store ({type(exc).__name__}: {exc})",
            )
        if membership.given_up():
            return NodeStop(
                kind=StopKind.NODES_LOST,
                node=None,
                attempt=self._attempt,
                text=f"{membership.describe(0)} took this node for lost: its launcher's beats "
                f"did not reach the store for more than {membership.lost_after:g} s (a machine "
                "short of CPU, or the network), and the other nodes stop their ranks",
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

    def share(self, snapshot: str) -> Shared:
        """This node's live snapshot (for `safelaunch status`) out; node 0: the others' in
        (live_exchange.py).

        A store that stopped answering leaves status with the last copies it got.
        """
        place = self._membership.placement
        try:
            return share(self._membership.store, place.node, place.nodes, self._attempt, snapshot)
        except Exception:
            return Shared(snapshots={}, hangs={})

    def stopped_elsewhere(self) -> NodeStop | None:
        """Another node's stop announcement for this attempt, looked at now."""
        try:
            stop = self._membership.stop_requested(self._attempt)
        except Exception:
            return None  # the next poll says what became of the store
        mine = stop is not None and stop.node == self._membership.placement.node
        return None if mine else stop

    def evidence_taken(self) -> None:
        """This node has its ranks' stacks of a hang: the others may stop theirs."""
        place = self._membership.placement
        with contextlib.suppress(Exception):  # the others' wait is bounded
            self._membership.store.set(self._evidence_key(place.node), "1")

    def others_have_evidence(self, seconds: float) -> bool:
        """Until every other node has its ranks' stacks of a hang, at most `seconds`.

        A node that stops its ranks closes their connections to every other node's: a
        rank there then raises and leaves before its own node has looked (seen at 4 nodes
        under load: a node told of the hang found one of its ranks in interpreter
        teardown and named it). The store wakes the waiter (no polling).
        """
        place = self._membership.placement
        keys = [self._evidence_key(n) for n in range(place.nodes) if n != place.node]
        if not keys:
            return True
        try:
            return self._membership.store.wait(keys, seconds)
        except Exception:
            return False

    def _evidence_key(self, node: int) -> str:
        return f"attempt/{self._attempt}/evidence/{node}"

    def announce(self, stop: NodeStop) -> None:
        """This node stops the attempt: tell the others (once)."""
        if self.announced:
            return
        self.announced = True
        with contextlib.suppress(Exception):  # else the others find this node silent
            self._membership.announce_stop(self._attempt, stop)
