"""The ranks' call ledgers as arbiter evidence: the per-group comparison and the wait-for
graph (group_calls.py, waitfor.py) turned into Items, and the groups the ledgers say
each rank last called in (for torch's group-local DETAIL texts, witnesses.py)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from safelaunch.diagnose.arbiter import Item, Source, Tier
from safelaunch.diagnose.group_calls import (
    Basis,
    GroupDivergence,
    Oddity,
    OddMember,
    compare_ledgers,
)
from safelaunch.diagnose.waitfor import wait_for
from safelaunch.diagnose.waitfor_items import items_of_graph
from safelaunch.diagnose.witnesses import one
from safelaunch.rundir.calls_file import Call, CallLedger
from safelaunch.vocab import COMMUNICATION


def items_of_ledgers(
    ledgers: Mapping[int, CallLedger],
    elsewhere: Collection[int] = (),
    here: Collection[int] | None = None,
) -> list[Item]:
    """The ledgers compared per group, and as a wait-for graph. Another op/size/dtype at a
    count, or one call more, by majority or against the rank's own loop, is content; a
    rank that never made the call, and a rank the others wait on, are behind; members
    that differ where nothing names one are "one of these" (ambiguous).

    The wait-for graph's cycles and the ranks others wait for: waitfor_items.py (a
    cycle through a collective is broken by the members this comparison finds odd, even
    only by another line; `elsewhere`: its words; `here`: this node's ranks, waitfor.py).
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
    broke = [
        (d, tuple(sorted(m.rank for m in d.odd)), _pointed_one(ledgers, d))
        for d in comparison.divergences
    ]
    items.extend(items_of_graph(wait_for(ledgers, here), ledgers, broke, elsewhere))
    return items


def _pointed_one(ledgers: Mapping[int, CallLedger], d: GroupDivergence) -> str | None:
    return one(_pointed(ledgers[m.rank], m, d.expected) for m in d.odd)


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
