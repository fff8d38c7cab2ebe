"""The collectives a rank's ledger does not hold, put back where torch counted them.

DDP's reducer all_reduces its gradient buckets from C++ (so does a library's own C++),
and no Python call writes them in the call ledger. torch counts every op a group issues
(collectives and p2p calls alike), those included: each ledger line carries the group's
count before its call (`seq`, rundir/calls_file.py), and the flight records (where the
launcher asked for them) each group's collectives. A gap between two lines of a group is
that many ops from C++, put back where they were; so are the collectives the flight
records counted after the rank's last line, where every member of the group has one
(unless the rank is blocked in a call of its ledger: nothing came after it).

`with_unseen` writes them in as calls of their own (op `collective`, no shape, no line),
and numbers every collective by its place among all the group's collectives (its count
becomes torch's), so the comparison per group (group_calls.py), the wait-for graph and
each rank's own loop see what the ranks really issued: a 2-rank DDP job whose rank 0
skipped its Python all_reduce meets its peer's all_reduce with DDP's next one, at the
same place, which the loops tell apart. Where a line lacks its count (a backend without
one, a ledger written before it existed, a ledger that lost its oldest lines to the cap),
the group's calls are left as they were written. Pure: ledgers in, ledgers out.
"""

from __future__ import annotations

from collections.abc import Mapping

from safelaunch.rundir.calls_file import Call, CallKind, CallLedger

UNSEEN_OP = "collective"
UNSEEN_WHAT = "(not from Python: DDP's, a library's)"


def with_unseen(
    ledgers: Mapping[int, CallLedger], flights: Mapping[int, Mapping[str, int]] | None = None
) -> dict[int, CallLedger]:
    """Every ledger with its unseen collectives written in (module docstring). `flights`:
    the collectives each group issued by each rank's flight record (issued_by_flights);
    used after a rank's last line only for a group every member of which has one: taken
    together when the launcher asked, they say how far each got at one moment (a count
    taken earlier on one rank, a heartbeat's, would make it look behind, and the others
    ahead look like callers of one more)."""
    flights = flights or {}
    members: dict[str, set[int]] = {}  # the members with a ledger: the ranks compared
    for ledger in ledgers.values():
        for group in ledger.groups:
            members.setdefault(group.name, set()).update(r for r in group.ranks if r in ledgers)
    together = {g for g, ranks in members.items() if all(g in flights.get(r, {}) for r in ranks)}
    return {
        r: _filled(ledger, {g: n for g, n in flights.get(r, {}).items() if g in together})
        for r, ledger in ledgers.items()
    }


def issued_by_flights(records: Mapping[int, Mapping[str, object]]) -> dict[int, dict[str, int]]:
    """Per rank, per group, the collectives its flight record says it issued (torch's
    collective_seq_id counts them all, DDP's too; Gloo records no p2p call). The record
    is taken when the launcher asks (a hang, the survivors of a failure): fresher than a
    heartbeat that a fast failure left an interval behind."""
    issued: dict[int, dict[str, int]] = {}
    for rank, record in records.items():
        entries = record.get("entries")
        for entry in entries if isinstance(entries, list) else ():
            try:
                if entry.get("is_p2p"):
                    continue
                group, seq = str(entry["process_group"][0]), int(entry["collective_seq_id"])
            except (AttributeError, KeyError, IndexError, TypeError, ValueError):
                continue
            mine = issued.setdefault(rank, {})
            mine[group] = max(mine.get(group, 0), seq)
    return issued


def is_unseen(call: Call) -> bool:
    return call.kind == CallKind.COLLECTIVE and call.what == UNSEEN_WHAT


def _filled(ledger: CallLedger, flight: Mapping[str, int]) -> CallLedger:
    if ledger.truncated:
        return ledger  # its first lines are gone: what they counted is not known
    counted = {
        g.name
        for g in ledger.groups
        if all(c.seq is not None for c in ledger.calls if c.group == g.name)
    }
    calls: list[Call] = []
    issued: dict[str, int] = {}  # the group's ops so far, as torch counts them
    place: dict[str, int] = {}  # the group's collectives so far, unseen ones included
    for call in ledger.calls:
        group = call.group
        if group in counted and call.seq is not None:
            if call.seq < issued.get(group, 0):  # out of order (another thread): as written
                counted.discard(group)
            else:
                for _ in range(call.seq - issued.get(group, 0)):
                    place[group] = place.get(group, 0) + 1
                    calls.append(_unseen(group, place[group]))
                issued[group] = call.seq + 1
                if call.kind == CallKind.COLLECTIVE:
                    place[group] = place.get(group, 0) + 1
                    call = _with(call, count=place[group])
        calls.append(call)
    if not any(c.blocked for c in ledger.calls):  # issued after its last line, from C++
        for group, last in sorted(flight.items()):
            if group in counted:
                for at in range(place.get(group, 0) + 1, last + 1):
                    place[group] = at
                    calls.append(_unseen(group, at))
    if not place:
        return ledger
    renumbered = tuple(_with(c, n=i) for i, c in enumerate(calls, start=1))
    return CallLedger(
        rank=ledger.rank, groups=ledger.groups, calls=renumbered, truncated=ledger.truncated
    )


def _with(call: Call, **changes: object) -> Call:
    return Call(**{**call.as_dict(), **changes})  # type: ignore[arg-type]


def _unseen(group: str, place: int) -> Call:
    return Call(
        n=0, kind=CallKind.COLLECTIVE, op=UNSEEN_OP, group=group, count=place,
        what=UNSEEN_WHAT, done=True,
    )  # fmt: skip
