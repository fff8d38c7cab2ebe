"""The ranks' call ledgers compared per process group: who called something else.

Where no flight record exists (a rank killed by an abort writes none; a backend without
one), the ledgers (rundir/calls_file.py) still say what each member of a group called
in what order. For each group, its members' collectives in the groups they all belong
to (the group itself, the world, any group holding them all) are walked in the order
each member issued them: in an SPMD program they are the same sequence. The first
position where the members differ is the group's finding (the calls after it are
shifted by it, so they are not findings of their own). Taking the shared groups
together finds a call made in the wrong group, or skipped in one while the others went
on in another, which counting each group alone misses. Where a member's ledger lost its
oldest lines (the cap), positions are the counts in the group alone.

- With three or more members to compare, by majority of (group, op, dtype[shape]): the odd
  members called another op, size or dtype (`other call`), never called it (`never
  called`), or called where most made no call (`extra call`).
- Without a majority (two members, or a tie), each member against its own earlier calls
  at that point of its loop: its whole ledger's (own_loop.py: every kind and group, the
  longest context seen before and what followed it), else the moves from one call to
  the next that the program made, in the other ranks' ledgers and its own, group names
  left out (loop_moves.py). (A rule of one loop period back, the shortest period the
  last two repeat with, is gone: DDP's warm-up steps made two periods by chance.) The
  member that departs from its loop while the others keep to theirs is odd; when none
  or all do, or one cannot be told, the group is undecided, and nobody is named.
- Where the members made the same call from different lines (legitimate: `if rank == 0:
  broadcast(a) else: broadcast(b)`), only a departure from its own loop makes a member
  odd; else a strict minority of lines is kept as a weak `site` finding, used only to say
  who broke the order in a cross-group deadlock (ledger_items.py), and the walk goes on.

A member that has not made the call at a count but is blocked in another call is held
up there (the wait-for graph says by whom), not odd: it takes no part in the vote.
Collectives DDP issues from C++ are not in the ledgers: unseen_calls.py writes them back
in where torch counted them, before the comparison. p2p calls are left to the wait-for
graph. Pure: ledgers in, a frozen LedgerComparison out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from safelaunch.diagnose import own_loop
from safelaunch.diagnose.loop_moves import Program, by_moves, program_of
from safelaunch.diagnose.unseen_calls import is_unseen
from safelaunch.ranktext import ranks_label
from safelaunch.rundir.calls_file import Call, CallKind, CallLedger
from safelaunch.vocab import StrEnum

NONE = ("", "")  # the signature of "made no call at this count"
Signature = tuple[str, ...]


class Oddity(StrEnum):
    OTHER = "other call"  # another op, size or dtype than the others
    MISSING = "never called"  # it made no call at that count, and is blocked in none
    EXTRA = "extra call"  # it called where the others made none


class Basis(StrEnum):
    MAJORITY = "majority"
    OWN_LOOP = "own loop"  # no majority: its departure from its own earlier calls
    SITE = "site"  # the same call, from another line than most: weak (module docstring)


@dataclass(frozen=True)
class OddMember:
    rank: int
    oddity: Oddity
    call: Call | None  # what it called at that count; None: nothing


@dataclass(frozen=True)
class GroupDivergence:
    group: str
    members: tuple[int, ...]
    position: int  # the first place in the members' shared sequence where they differ
    expected: Call | None  # the call the others made (None: they made none)
    odd: tuple[OddMember, ...]
    basis: Basis
    text: str  # one line of words


@dataclass(frozen=True)
class Undecided:
    """A group whose members made different calls where nothing names the odd one."""

    group: str
    ranks: tuple[int, ...]  # the members that differ
    text: str
    tied: bool = False  # each of them made a call there: two calls, nothing says whose is odd


@dataclass(frozen=True)
class LedgerComparison:
    divergences: tuple[GroupDivergence, ...]  # decided: odd members named
    undecided: tuple[Undecided, ...]  # groups whose members differ where nothing names one
    findings: tuple[str, ...]  # one line of words each: divergences, then undecided

    @property
    def culprits(self) -> tuple[int, ...]:
        """The odd members of the decided divergences (not the weak `site` ones)."""
        return tuple(
            sorted({m.rank for d in self.divergences if d.basis != Basis.SITE for m in d.odd})
        )


def compare_ledgers(ledgers: Mapping[int, CallLedger]) -> LedgerComparison:
    """Each group's first divergence among the members whose ledgers are given."""
    groups: dict[str, tuple[int, ...]] = {}
    for ledger in ledgers.values():
        for group in ledger.groups:
            groups.setdefault(group.name, group.ranks)
    decided: list[GroupDivergence] = []
    undecided: list[Undecided] = []
    compared: set[tuple[int, ...]] = set()  # groups of the same members: the same sequence
    for name, ranks in sorted(groups.items(), key=lambda item: _order(item[0])):
        present = tuple(r for r in ranks if r in ledgers)
        if len(present) < 2 or ranks in compared:
            continue
        compared.add(ranks)
        shared = {g for g, members in groups.items() if set(ranks) <= set(members)}
        found = _first_divergence(name, present, ledgers, shared)
        if found is not None and present != ranks:  # one node's ledgers of a larger group
            head = _head(name, present, 0).rsplit(",", 1)[0]
            seen = f"group {name} ({ranks_label(present)} of its {len(ranks)} ranks, as held here)"
            found = replace(found, text=found.text.replace(head, seen, 1))
        if isinstance(found, GroupDivergence):
            decided.append(found)
        elif found is not None:
            undecided.append(found)
    findings = tuple(d.text for d in decided) + tuple(u.text for u in undecided)
    return LedgerComparison(
        divergences=tuple(decided), undecided=tuple(undecided), findings=findings
    )


def _order(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 62, name)


def _first_divergence(
    group: str, members: tuple[int, ...], ledgers: Mapping[int, CallLedger], shared: set[str]
) -> GroupDivergence | Undecided | None:
    whole = not any(ledgers[m].truncated for m in members)
    calls = {m: _aligned(ledgers[m], group, shared if whole else {group}) for m in members}
    blocked = {m for m in members if any(c.blocked for c in ledgers[m].calls)}
    start = max((min(c) for c in calls.values() if c), default=1)
    end = max((max(c) for c in calls.values() if c), default=0)
    program = program_of(ledgers, members, {c.where for m in members for c in calls[m].values()})
    # the first place where they made the same call from other lines: its minority, or
    # why nobody is named there
    site: GroupDivergence | Undecided | None = None
    for count in range(start, end + 1):
        at = {m: calls[m].get(count) for m in members}
        # absent but blocked in another call: held up there, no vote
        voters = [m for m in members if at[m] is not None or m not in blocked]
        if len(voters) < 2 or len({_full(at[m]) for m in voters}) == 1:
            continue
        # only collectives from C++ there, some members with none: how far each got
        # when its count was taken (a flight record, or none: a rank that died), not a
        # call of one more, nor one it never made
        if all((c := at[m]) is None or is_unseen(c) for m in voters):
            continue
        if len({_short(at[m]) for m in voters}) == 1:  # the same call from other lines
            found = _by_own_loop(group, members, count, calls, voters, program, ledgers)
            if isinstance(found, GroupDivergence):
                return found
            site = site or _by_site(group, members, count, at, voters) or found
            continue
        if len(voters) >= 3:
            majority = _majority({m: _short(at[m]) for m in voters})
            if majority is not None:
                return _by_majority(group, members, count, at, voters, majority)
        found = _by_own_loop(group, members, count, calls, voters, program, ledgers)
        # past an extra call from another line, each loop is compared shifted: no verdict
        return found if site is None else site
    return site


def _aligned(ledger: CallLedger, group: str, shared: set[str]) -> dict[int, Call]:
    """The rank's collectives in the shared groups by position (1, 2, ...); by count in
    `group` when that is the only one (a truncated ledger: positions are unknown)."""
    calls = [c for c in ledger.calls if c.kind == CallKind.COLLECTIVE and c.group in shared]
    if shared == {group}:
        return {c.count: c for c in calls if c.count is not None}
    return dict(enumerate(calls, start=1))


def _short(call: Call | None) -> Signature:
    return NONE if call is None else (call.group, *call.signature())


def _full(call: Call | None) -> Signature:
    return NONE if call is None else (call.group, *call.signature(), call.where)


def _majority(signatures: Mapping[int, Signature]) -> Signature | None:
    """The signature more than half of them share, when they differ at all."""
    if len(set(signatures.values())) < 2:
        return None
    top, n = Counter(signatures.values()).most_common(1)[0]
    return top if 2 * n > len(signatures) else None


def _oddity(call: Call | None, expected: Call | None) -> Oddity:
    if call is None:
        return Oddity.MISSING
    return Oddity.EXTRA if expected is None else Oddity.OTHER


def _by_majority(
    group: str,
    members: tuple[int, ...],
    count: int,
    at: Mapping[int, Call | None],
    voters: Sequence[int],
    majority: Signature,
) -> GroupDivergence:
    agreeing = [m for m in voters if _short(at[m]) == majority]
    return _odd_ones(group, members, count, at, voters, agreeing, Basis.MAJORITY)


def _odd_ones(
    group: str,
    members: tuple[int, ...],
    count: int,
    at: Mapping[int, Call | None],
    voters: Sequence[int],
    agreeing: Sequence[int],
    basis: Basis,
    note: str = "",
) -> GroupDivergence:
    """The voters outside `agreeing` are odd, against what the first agreeing one called."""
    expected = at[agreeing[0]]
    odd = tuple(
        OddMember(rank=m, oddity=_oddity(at[m], expected), call=at[m])
        for m in voters
        if m not in agreeing
    )
    return GroupDivergence(
        group=group,
        members=members,
        position=count,
        expected=expected,
        odd=odd,
        basis=basis,
        text=_text(group, members, count, expected, agreeing, odd) + note,
    )


def _by_own_loop(
    group: str,
    members: tuple[int, ...],
    count: int,
    calls: Mapping[int, Mapping[int, Call]],
    voters: Sequence[int],
    program: Program,
    ledgers: Mapping[int, CallLedger],
) -> GroupDivergence | Undecided:
    departs: dict[int, bool] = {}
    loops: dict[int, str] = {}
    for m in voters:
        here = calls[m].get(count)
        kept = None if here is None else own_loop.keeps(ledgers[m], here)
        if kept is not None:  # its whole ledger, every kind and group: the strongest
            departs[m], loops[m] = not kept, f"rank {m}'s calls before it"
        else:  # the moves the program made before, its own and the other ranks'
            moved = by_moves(m, count, calls, program)
            if moved is not None:
                departs[m], loops[m] = moved
    odd_ranks = [m for m in voters if departs.get(m)]
    keeping = [m for m in voters if departs.get(m) is False]
    shown = _head(group, members, count)
    if not odd_ranks or not keeping or len(departs) < len(voters):
        calls_at = "; ".join(f"rank {m}: {_shown(calls[m].get(count), group)}" for m in voters)
        return Undecided(
            group=group,
            ranks=tuple(voters),
            text=f"{shown}: the members differ ({calls_at}) and no majority or loop names one",
            tied=all(calls[m].get(count) is not None for m in voters),
        )
    expected = calls[keeping[0]].get(count)
    odd = tuple(
        OddMember(rank=m, oddity=_oddity(calls[m].get(count), expected), call=calls[m].get(count))
        for m in odd_ranks
    )
    text = _text(group, members, count, expected, keeping, odd)
    said = "; ".join(loops[m] for m in odd_ranks)
    text += f" (no majority: it departs from its own earlier calls: {said})"
    return GroupDivergence(
        group=group,
        members=members,
        position=count,
        expected=expected,
        odd=odd,
        basis=Basis.OWN_LOOP,
        text=text,
    )


def _by_site(
    group: str,
    members: tuple[int, ...],
    count: int,
    at: Mapping[int, Call | None],
    voters: Sequence[int],
) -> GroupDivergence | None:
    """The strict minority of lines among members that made the same call, if any."""
    where = {m: c.where for m in voters if (c := at[m]) is not None}
    (common, most), (_, second) = Counter(where.values()).most_common(2)
    if most == second:
        return None
    agreeing = [m for m in voters if where.get(m) == common]
    note = " (the same call, another line)"
    return _odd_ones(group, members, count, at, voters, agreeing, Basis.SITE, note)


def _shown(call: Call | None, group: str) -> str:
    if call is None:
        return "no call"
    return call.shown() + ("" if call.group == group else f" in group {call.group}")


def _head(group: str, members: tuple[int, ...], position: int) -> str:
    return f"group {group} ({ranks_label(members)}), their collective {position}"


def _text(
    group: str,
    members: tuple[int, ...],
    count: int,
    expected: Call | None,
    agreeing: Sequence[int],
    odd: Sequence[OddMember],
) -> str:
    head = _head(group, members, count)
    others = ranks_label(agreeing)
    parts = []
    for member in odd:
        who = f"rank {member.rank}"
        if member.oddity is Oddity.OTHER:
            called, instead = _shown(member.call, group), _shown(expected, group)
            parts.append(f"{who} called {called} where {others} called {instead}")
        elif member.oddity is Oddity.MISSING:
            parts.append(f"{who} never called {_shown(expected, group)}, which {others} called")
        else:
            parts.append(f"{who} called {_shown(member.call, group)}, which {others} never called")
    return f"{head}: {'; '.join(parts)}"
