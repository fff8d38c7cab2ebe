"""Elastic scale-up: a node that waits to join stops the attempt, so the next round admits it.

torchrun's agent (torch/distributed/elastic/agent/server/api.py, `_invoke_run`) asks
its rendezvous handler, while the workers are healthy, how many nodes wait for the next
round (`num_nodes_waiting()`), and when any do, restarts the worker group without
counting a restart ("membership changes do not count as retries"). Here the same
question is asked beside the node watch; the first node to see a waiting node announces
it, so every node stops its ranks within the watch's tick even before its own look.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from safelaunch.rendezvous.live_exchange import Shared
from safelaunch.rendezvous.membership import Membership
from safelaunch.rendezvous.nodewatch import NodeWatch
from safelaunch.rendezvous.stops import NodeStop, nodes_joining

# Each look reads torch's rendezvous state from the store (one get): torchrun's agent
# looks every monitor interval (0.1 s); once a second admits a node as soon, given the
# seconds its round takes to close (last_call_timeout).
LOOK_EVERY = 1.0


class AdmitWatch:
    """The node watch, and the nodes waiting to join (an elastic job below its maximum)."""

    def __init__(
        self,
        membership: Membership,
        attempt: int,
        every: float = LOOK_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._membership = membership
        self._nodes = membership.watch(attempt)
        self._attempt = attempt
        self._every = every
        self._clock = clock
        self._next = clock() + every

    @property
    def pace(self) -> float:
        return min(self._every, self._nodes.pace)

    def poll(self) -> NodeStop | None:
        stop = self._nodes.poll()
        if stop is not None:
            return stop
        now = self._clock()
        if now < self._next:
            return None
        self._next = now + self._every
        try:
            waiting = self._membership.nodes_waiting()
        except Exception:
            return None  # the store is gone: the node watch says so
        if waiting <= 0:
            return None
        stop = nodes_joining(self._membership.placement.node, self._attempt, waiting)
        self._nodes.announce(stop)
        return stop

    def announce(self, stop: NodeStop) -> None:
        self._nodes.announce(stop)

    def share(self, snapshot: str) -> Shared:
        return self._nodes.share(snapshot)

    def stopped_elsewhere(self) -> NodeStop | None:
        return self._nodes.stopped_elsewhere()

    def evidence_taken(self) -> None:
        self._nodes.evidence_taken()

    def others_have_evidence(self, seconds: float) -> bool:
        return self._nodes.others_have_evidence(seconds)


def watch(membership: Membership, attempt: int, room: bool) -> AdmitWatch | NodeWatch:
    """What the supervisor polls: with room for more nodes (elastic), the waiting ones too."""
    return AdmitWatch(membership, attempt) if room else membership.watch(attempt)
