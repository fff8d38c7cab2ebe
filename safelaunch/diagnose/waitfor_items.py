"""The wait-for graph (waitfor.py) as arbiter evidence, each rank's own loop deciding who
of the ranks in a cycle, or of a waiter and the rank it waits for, departed.

- A cycle through sends and receives only: each rank in it waits to receive (or send)
  first. The ranks whose blocked call departs from their own loop (own_loop.py) while
  the others' keeps broke it (a stage that skipped its send: the others receive as
  always); where every one departs (each now receives first), all of them did; where
  their loops cannot say, the cycle names all of them only if every rank waits in the
  same call at the same line (the program's one statement deadlocks them all); else it
  is "one of these" (the first step of a pipeline whose stage 0 skipped its send looks
  exactly like a ring where every stage receives first).
- A cycle through a collective: the ranks issue their collectives in different orders;
  the members the per-group comparison finds odd broke it (ledger_items.py passes them);
  where it finds none, the members whose blocked call departs from their own loop while
  the others' keeps (a stage that skipped a send and went on to the step's all_reduce).
- A rank others wait for, itself in no call: named where it is waited for by more ranks
  than there are such ranks (waitfor.py); with as many (two ranks, 1:1) only where
  every rank waiting for it keeps to its own loop in the call it waits in (the waiting
  side did what it always does, the other did not come), or where, when the first of
  them failed only by timing out, the stacks saw it outside any call, its script not
  ended (asleep, computing, reading: the one the timeout waited for).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from safelaunch.diagnose import own_loop
from safelaunch.diagnose.arbiter import Item, Source, Tier
from safelaunch.diagnose.group_calls import GroupDivergence
from safelaunch.diagnose.waitfor import Edge, WaitFor
from safelaunch.diagnose.witnesses import one, shorten
from safelaunch.ranktext import ranks_label
from safelaunch.rundir.calls_file import Call, CallLedger
from safelaunch.vocab import COMMUNICATION


def items_of_graph(
    graph: WaitFor,
    ledgers: Mapping[int, CallLedger],
    broke: Sequence[tuple[GroupDivergence, tuple[int, ...], str | None]] = (),
    elsewhere: Collection[int] = (),
) -> list[Item]:
    """Items for the graph's cycles and sinks. `broke`: per-group divergences whose odd
    members (with the line their finding points at) may have broken a collective cycle.
    `elsewhere`: ranks the stacks saw outside any call, their script not ended, when the
    first rank failed only by waiting (a timeout)."""
    items: list[Item] = []
    for cycle in graph.cycles:
        inside = [e for e in graph.edges if e.waiter in cycle and e.waited_on in cycle]
        why = "; ".join(e.why for e in inside)
        says = f"program deadlock: {ranks_label(cycle)} wait on each other in a cycle" + (
            f" ({shorten(why, 240)})" if why else ""
        )
        if not any(e.collective for e in inside):
            found = _by_loops(cycle, inside, ledgers, says, p2p=True)
            items.append(found or _p2p_cycle(cycle, inside, ledgers, says))
        else:  # the per-group comparison's odd members first: it says what they did
            broken = _collective_cycle(cycle, says, broke)
            found = _by_loops(cycle, inside, ledgers, says, p2p=False)
            items.append(found if broken.ambiguous and found else broken)
    items.extend(_sinks(graph, ledgers, elsewhere))
    return items


def _waits_in(edges: Sequence[Edge], ledgers: Mapping[int, CallLedger]) -> dict[int, Call]:
    """Each waiter's call it waits in (its edges' call, from its ledger)."""
    found: dict[int, Call] = {}
    for e in edges:
        ledger = ledgers.get(e.waiter)
        call = next((c for c in ledger.calls if c.n == e.n), None) if ledger else None
        if call is not None:
            found.setdefault(e.waiter, call)
    return found


def _by_loops(
    cycle: tuple[int, ...],
    inside: Sequence[Edge],
    ledgers: Mapping[int, CallLedger],
    says: str,
    p2p: bool,
) -> Item | None:
    """The members whose blocked call departs from their own loop while every other
    member's keeps to its own; every member, in a p2p cycle where each one departs."""
    waits = _waits_in(inside, ledgers)
    if len(waits) < len(cycle):
        return None
    judged = {r: own_loop.keeps(ledgers[r], c) for r, c in waits.items()}
    departs = tuple(sorted(r for r, k in judged.items() if k is False))
    kept = [r for r in cycle if judged.get(r) is True]
    if not departs or len(departs) + len(kept) < len(cycle) or not (kept or p2p):
        return None
    how = (
        f"{ranks_label(departs)} left {'its' if len(departs) == 1 else 'their'} own loop "
        f"where {ranks_label(kept)} kept to theirs"
        if kept
        else "every one of them left its own loop there"
    )
    return Item(
        source=Source.WAIT_FOR, tier=Tier.CONTENT, ranks=departs, says=f"{says}: {how}",
        location=one(waits[r].where or None for r in departs), klass=COMMUNICATION,
    )  # fmt: skip


def _p2p_cycle(
    cycle: tuple[int, ...], inside: Sequence[Edge], ledgers: Mapping[int, CallLedger], says: str
) -> Item:
    """Where the loops cannot say: all of them if all wait in one call at one line."""
    waits = _waits_in(inside, ledgers)
    if len(waits) == len(cycle) and len({(c.op, c.where) for c in waits.values()}) == 1:
        return Item(
            source=Source.WAIT_FOR, tier=Tier.CONTENT, ranks=cycle, says=says,
            location=one(c.where or None for c in waits.values()), klass=COMMUNICATION,
        )  # fmt: skip
    return Item(
        source=Source.WAIT_FOR, tier=Tier.CONTENT, ranks=cycle, ambiguous=True,
        says=f"{says}: they wait at different lines, and nothing says whose loop departs",
    )  # fmt: skip


def _collective_cycle(
    cycle: tuple[int, ...],
    says: str,
    broke: Sequence[tuple[GroupDivergence, tuple[int, ...], str | None]],
) -> Item:
    inside = [b for b in broke if set(b[1]) < set(cycle)]
    if not inside:
        return Item(
            source=Source.WAIT_FOR, tier=Tier.BEHIND, ranks=cycle, ambiguous=True,
            says=f"{says}: their collectives are in different orders, and nothing "
            "says whose order departs",
        )  # fmt: skip
    first, breakers, where = inside[0]
    return Item(
        source=Source.WAIT_FOR,
        tier=Tier.CONTENT,
        ranks=breakers,
        says=f"cross-group deadlock: {ranks_label(cycle)} wait on each other in a "
        f"cycle because {ranks_label(breakers)} broke the order of the collectives: "
        f"{shorten(first.text, 240)}",
        location=where,
        klass=COMMUNICATION,
    )


def _sinks(
    graph: WaitFor, ledgers: Mapping[int, CallLedger], elsewhere: Collection[int]
) -> list[Item]:
    seen = tuple(s.rank for s in graph.sinks if s.rank in elsewhere)
    named = graph.culprits or _waited_for_by_keepers(graph, ledgers) or seen
    if not named:
        return []
    whys = "; ".join(s.why for s in graph.sinks if s.rank in named)
    if not graph.culprits:
        whys += (
            " (when the first rank timed out, its stack was outside any call)"
            if named == seen
            else " (the ranks waiting keep to their own loops)"
        )
    return [Item(source=Source.WAIT_FOR, tier=Tier.BEHIND, ranks=named, says=shorten(whys, 240))]


def _waited_for_by_keepers(graph: WaitFor, ledgers: Mapping[int, CallLedger]) -> tuple[int, ...]:
    """The sinks every direct waiter of which waits in a call its own loop makes there."""
    named = []
    for sink in graph.sinks:
        direct = [e for e in graph.edges if e.waited_on == sink.rank]
        waits = _waits_in(direct, ledgers)
        every = bool(direct) and len(waits) == len({e.waiter for e in direct})
        if every and all(own_loop.keeps(ledgers[r], c) is True for r, c in waits.items()):
            named.append(sink.rank)
    return tuple(named)
