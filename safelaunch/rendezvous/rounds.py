"""An elastic job's rounds: who left, who joined, and the job's count, the same on every node.

Each round of torch's c10d rendezvous numbers its nodes afresh (sorted by torch's node
descriptors), so a node's rank says nothing across rounds. Each launcher therefore
brings a stable id to the round's exchange (joining.py), with the job's attempt and
restart count as it knows them and the ids of the round it comes from. From those
records every node, a node that just joined included, draws the same `Round`: pure
functions, tested with tables (tests/test_rounds.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from safelaunch.vocab import StrEnum

# This launcher across rounds (its node rank is the round's; its pid may repeat elsewhere).
LAUNCHER_ID = uuid.uuid4().hex[:12]


class RoundCause(StrEnum):
    """Why the nodes met again (report.json's membership[].cause)."""

    LOST = "lost"  # a node of the last round is gone: a failure, counted as a restart
    WAITING = "waiting"  # nodes waited to join: not a restart, as torchrun's agent counts it
    RESTART = "restart"  # a failure with every node there: the same nodes meet again


@dataclass(frozen=True, slots=True, kw_only=True)
class Round:
    """One round of the rendezvous, as every node of it sees it."""

    attempt: int  # the attempt it starts: the job's (a node that joins late takes it)
    restart_count: int  # TORCHELASTIC_RESTART_COUNT: failures restarted so far
    launchers: tuple[str, ...]  # per node of this round
    hosts: tuple[str, ...]  # per node of this round
    hosts_before: tuple[str, ...]  # per node of the previous round; () for the first
    left: tuple[int, ...]  # nodes of the previous round not in this one (its numbering)
    joined: tuple[int, ...]  # nodes of this round not in the previous one (this numbering)

    @property
    def first(self) -> bool:
        return not self.hosts_before

    @property
    def cause(self) -> RoundCause:
        if self.left:
            return RoundCause.LOST
        return RoundCause.WAITING if self.joined else RoundCause.RESTART

    def left_names(self) -> list[str]:
        return [f"node {n} ({self.hosts_before[n]})" for n in self.left]

    def joined_names(self) -> list[str]:
        return [f"node {n} ({self.hosts[n]})" for n in self.joined]


def my_record(attempt: int, restart_count: int, before: Round | None) -> dict[str, Any]:
    """What this launcher adds to its round's exchange (beside host, nproc and facts)."""
    return {
        "launcher": LAUNCHER_ID,
        "attempt": attempt,
        "restart_count": restart_count,
        "before": list(before.launchers) if before else [],
        "before_hosts": list(before.hosts) if before else [],
    }


def round_of(records: Sequence[Mapping[str, Any]]) -> Round:
    """The round every node draws from the same records (one per node, in node order).

    The job's attempt and count are the highest any node brings (a node that starts late
    brings 0); the previous round is the one its nodes name (they all name the same).
    """
    launchers = tuple(str(r.get("launcher", f"?{n}")) for n, r in enumerate(records))
    old = next((r for r in records if r.get("before")), None)
    before = [str(x) for x in old["before"]] if old else []
    hosts_before = tuple(str(h) for h in old.get("before_hosts", [])) if old else ()
    if len(hosts_before) != len(before):
        hosts_before = tuple("?" for _ in before)
    return Round(
        attempt=max((int(r.get("attempt", 0)) for r in records), default=0),
        restart_count=max((int(r.get("restart_count", 0)) for r in records), default=0),
        launchers=launchers,
        hosts=tuple(str(r.get("host", "?")) for r in records),
        hosts_before=hosts_before,
        left=tuple(n for n, x in enumerate(before) if x not in launchers),
        joined=tuple(n for n, x in enumerate(launchers) if before and x not in before),
    )


def change_record(change: Round) -> dict[str, Any]:
    """report.json's membership entry for a round after the first (docs/report-json.md)."""
    return {
        "attempt": change.attempt,
        "cause": change.cause.value,
        "left": change.left_names(),
        "left_in_attempt": change.attempt - 1 if change.left else None,
        "joined": change.joined_names(),
        "restart_count": change.restart_count,
        "nodes_before": len(change.hosts_before),
        "nodes": len(change.hosts),
        "hosts": list(change.hosts),
    }


def change_line(change: Round, max_restarts: int) -> str:
    """The console's one line for a round after the first."""
    parts = []
    if change.left:
        parts.append(f"{', '.join(change.left_names())} left")
    if change.joined:
        parts.append(f"{', '.join(change.joined_names())} joined")
    what = " and ".join(parts) or "the same nodes met again"
    counted = (
        "not counted as a restart (torchrun's rule)"
        if change.cause is RoundCause.WAITING
        else "a restart"
    )
    return (
        f"elastic: attempt {change.attempt}: {what}: {len(change.hosts_before)} -> "
        f"{len(change.hosts)} node(s); {counted}, {change.restart_count} of {max_restarts} used"
    )
