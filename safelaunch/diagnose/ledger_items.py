"""The ranks' call ledgers as arbiter evidence: the per-group comparison and the wait-for
graph (group_calls.py, waitfor.py) turned into Items, and the groups the ledgers say
each rank last called in (for torch's group-local DETAIL texts, witnesses.py)."""

from __future__ import annotations

from collections.abc import Mapping

from safelaunch.diagnose.arbiter import Item, Source, Tier
from safelaunch.diagnose.group_calls import Basis, Oddity, OddMember, compare_ledgers
from safelaunch.diagnose.waitfor import wait_for
from safelaunch.diagnose.witnesses import one, shorten
from safelaunch.ranktext import ranks_label
from safelaunch.rundir.calls_file import Call, CallLedger
from safelaunch.vocab import COMMUNICATION


def items_of_ledgers(ledgers: Mapping[int, CallLedger]) -> list[Item]:
    """The ledgers compared per group, and as a wait-for graph. Another op/size/dtype at a
    count, or one call more, by majority or against the rank's own loop, is content; a
    rank that never made the call, and a rank the others wait on, are behind; members
    that differ where nothing names one are "one of these" (ambiguous).

    A cycle of waits is a program deadlock (content). A cycle through p2p calls only names
    every rank in it (each waits to receive first). A cycle through a collective means
    the ranks issue their collectives in different orders: the members the comparison
    finds odd (even only by another line) broke the order, and are the cycle's culprits;
    where it finds none inside the cycle, the cycle is "one of these".
    """
    if not ledgers:
        return []
    comparison = compare_ledgers(ledgers)
    items: list[Item] = []
    for d in comparison.divergences:
        if d.basis == Basis.SITE:
            continue  # weak alone: another line may be the program's own (group_calls.py)
        for oddity in (Oddity.OTHER, Oddity.MISSING, Oddity.EXTRA):
            odd = [m for m in d.odd if m.oddity == oddity]
            if not odd:
                continue
            # another call, or one more, is what the rank did (content), whether the
            # others' majority or its own loop says so; a call it never made may be a
            # straggler's (behind)
            content = oddity != Oddity.MISSING
            items.append(
                Item(
                    source=Source.CALL_LEDGER,
                    tier=Tier.CONTENT if content else Tier.BEHIND,
                    ranks=tuple(sorted(m.rank for m in odd)),
                    says=d.text,
                    location=one(_pointed(ledgers[m.rank], m, d.expected) for m in odd),
                    klass=COMMUNICATION if content else None,
                )
            )
    for u in comparison.undecided:
        if not u.tied:  # one made a call, one did not: where it is, is the stacks' to say
            continue
        items.append(
            Item(
                source=Source.CALL_LEDGER, tier=Tier.BEHIND, ranks=u.ranks, says=u.text,
                ambiguous=True,
            )
        )  # fmt: skip
    graph = wait_for(ledgers)
    for cycle in graph.cycles:
        inside = [e for e in graph.edges if e.waiter in cycle and e.waited_on in cycle]
        why = "; ".join(e.why for e in inside)
        says = f"program deadlock: {ranks_label(cycle)} wait on each other in a cycle" + (
            f" ({shorten(why, 240)})" if why else ""
        )
        if not any(e.collective for e in inside):
            waits = (c for r in cycle if r in ledgers for c in ledgers[r].calls if c.blocked)
            items.append(
                Item(
                    source=Source.WAIT_FOR, tier=Tier.CONTENT, ranks=cycle, says=says,
                    location=one(c.where or None for c in waits), klass=COMMUNICATION,
                )
            )  # fmt: skip
            continue
        broke = [d for d in comparison.divergences if {m.rank for m in d.odd} < set(cycle)]
        if not broke:
            items.append(
                Item(
                    source=Source.WAIT_FOR, tier=Tier.BEHIND, ranks=cycle, ambiguous=True,
                    says=f"{says}: their collectives are in different orders, and nothing "
                    "says whose order departs",
                )
            )  # fmt: skip
            continue
        first = broke[0]
        breakers = tuple(sorted(m.rank for m in first.odd))
        items.append(
            Item(
                source=Source.WAIT_FOR,
                tier=Tier.CONTENT,
                ranks=breakers,
                says=f"cross-group deadlock: {ranks_label(cycle)} wait on each other in a "
                f"cycle because {ranks_label(breakers)} broke the order of the collectives: "
                f"{shorten(first.text, 240)}",
                location=one(_pointed(ledgers[m.rank], m, first.expected) for m in first.odd),
                klass=COMMUNICATION,
            )
        )
    if graph.culprits:
        whys = "; ".join(s.why for s in graph.sinks if s.rank in graph.culprits)
        items.append(
            Item(
                source=Source.WAIT_FOR,
                tier=Tier.BEHIND,
                ranks=graph.culprits,
                says=shorten(whys, 240),
            )
        )
    return items


def _pointed(ledger: CallLedger, odd: OddMember, expected: Call | None) -> str | None:
    """The line an odd member's finding points at: its extra or other call; but where that
    other call is one it made before (it went on past the expected one, as a skipped call
    does), the expected call's line. None for a call it never made."""
    call = odd.call
    if call is None:  # where it is instead is for its stack or heartbeat to say
        return None
    went_on = expected is not None and expected.where and call.where != expected.where
    if went_on and any(c.where == call.where for c in ledger.calls if c.n < call.n):
        return expected.where if expected is not None else None
    return call.where or None


def last_groups(ledgers: Mapping[int, CallLedger]) -> dict[int, tuple[int, ...]]:
    """The members of the group each rank's last collective ran in (its ledger)."""
    found: dict[int, tuple[int, ...]] = {}
    for rank, ledger in ledgers.items():
        last = next((c for c in reversed(ledger.calls) if c.count is not None), None)
        group = ledger.group(last.group) if last is not None else None
        if group is not None:
            found[rank] = group.ranks
    return found
