"""An elastic job's rounds: who left, who joined, and the job's count, the same on every node.

Each round of torch's c10d rendezvous numbers its nodes afresh (sorted by torch's node
descriptors), so a node's rank says nothing across rounds. Each launcher therefore brings
to the round's exchange (roster.py) the job's attempt and restart count as it knows them
and where it stood in the round it comes from: that round's token (drawn by its node 0)
and its number there. Node 0 of the new round draws the `Round` from those records, of a
size that does not grow with the job, and publishes it: pure functions, tested with
tables (tests/test_rounds.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from safelaunch.vocab import StrEnum


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
    token: str  # this round's name, drawn by its node 0: the next round's nodes bring it
    hosts: tuple[str, ...]  # per node of this round
    nodes_before: int  # nodes of the previous round; 0 for the first
    left: tuple[int, ...]  # nodes of the previous round not in this one (its numbering)
    left_hosts: tuple[str, ...]  # their hosts, as the previous round named them
    joined: tuple[int, ...]  # nodes of this round not in the previous one (this numbering)

    @property
    def first(self) -> bool:
        return self.nodes_before == 0

    @property
    def cause(self) -> RoundCause:
        if self.left:
            return RoundCause.LOST
        return RoundCause.WAITING if self.joined else RoundCause.RESTART

    def left_names(self) -> list[str]:
        return [f"node {n} ({host})" for n, host in zip(self.left, self.left_hosts, strict=True)]

    def joined_names(self) -> list[str]:
        return [f"node {n} ({self.hosts[n]})" for n in self.joined]


def new_token() -> str:
    """A name for a round, unique across the job's rounds (node 0 draws it)."""
    return uuid.uuid4().hex[:12]


def my_record(attempt: int, restart_count: int, before: Round | None, node: int) -> dict[str, Any]:
    """What this launcher adds to its round's exchange (beside host, nproc and facts):
    the job's count as it knows it and its place in the round it comes from, `node` of
    `before` (None: it comes from none). A few dozen bytes, whatever the job's size."""
    return {
        "attempt": attempt,
        "restart_count": restart_count,
        "before": [before.token, node, len(before.hosts)] if before else None,
    }


def before_of(record: Mapping[str, Any]) -> tuple[str, int, int] | None:
    """(token, node, nodes) of the round a record's node comes from; None: none."""
    said = record.get("before")
    if not isinstance(said, list) or len(said) != 3:
        return None
    token, node, nodes = said
    if not isinstance(token, str) or not isinstance(node, int) or not isinstance(nodes, int):
        return None
    return token, node, nodes


def round_of(
    records: Sequence[Mapping[str, Any]], token: str, hosts_before: Sequence[str]
) -> Round:
    """The round node 0 draws from every node's record (in node order) and publishes.

    The job's attempt and count are the highest any node brings (a node that starts late
    brings 0); the previous round is the one the first node from a previous round names
    (they all name the same), and a node that names no round or another one joined.
    `hosts_before`: the previous round's hosts where node 0 knows them (it was in it, or
    a node that was wrote them: roster.py); a host not known is "?".
    """
    places = [before_of(r) for r in records]
    old = next((p for p in places if p is not None), None)
    came = {p[1] for p in places if p is not None and old is not None and p[0] == old[0]}
    nodes_before = old[2] if old else 0
    left = tuple(n for n in range(nodes_before) if n not in came)
    return Round(
        attempt=max((int(r.get("attempt", 0)) for r in records), default=0),
        restart_count=max((int(r.get("restart_count", 0)) for r in records), default=0),
        token=token,
        hosts=tuple(str(r.get("host", "?")) for r in records),
        nodes_before=nodes_before,
        left=left,
        left_hosts=tuple(
            str(hosts_before[n]) if len(hosts_before) == nodes_before else "?" for n in left
        ),
        joined=tuple(
            n for n, p in enumerate(places) if old is not None and (p is None or p[0] != old[0])
        ),
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
        "nodes_before": change.nodes_before,
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
        f"elastic: attempt {change.attempt}: {what}: {change.nodes_before} -> "
        f"{len(change.hosts)} node(s); {counted}, {change.restart_count} of {max_restarts} used"
    )
