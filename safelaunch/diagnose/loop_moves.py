"""The moves a program makes from one collective to the next, as the ranks' ledgers show
them: what group_calls.py's own-loop rule asks before a rank has two whole loop periods
behind it (does this move keep to the loop, or depart from it?)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from safelaunch.rundir.calls_file import Call, CallKind, CallLedger

Step = tuple[str, ...]  # op, dtype[shape], file:line: a call, its group's name left out


@dataclass(frozen=True)
class Program:
    """What the other ranks' ledgers show the program doing at the members' lines: its
    moves (one collective to the next) and its calls, group names left out (each rank has
    subgroups of its own)."""

    moves: frozenset[tuple[Step, Step]]
    calls: frozenset[Step]


def _step(call: Call) -> Step:
    return (*call.signature(), call.where)


START: Step = ("", "", "start")  # before a rank's first call at these lines


def program_of(
    ledgers: Mapping[int, CallLedger], members: Sequence[int], sites: set[str]
) -> Program:
    moves: set[tuple[Step, Step]] = set()
    made: set[Step] = set()
    for rank, ledger in ledgers.items():
        if rank in members:
            continue
        steps = [
            _step(c) for c in ledger.calls if c.kind == CallKind.COLLECTIVE and c.where in sites
        ]
        moves.update(pairwise([START, *steps]) if not ledger.truncated else pairwise(steps))
        made.update(steps)
    return Program(moves=frozenset(moves), calls=frozenset(made))


def by_moves(
    member: int, count: int, calls: Mapping[int, Mapping[int, Call]], program: Program
) -> tuple[bool, str] | None:
    """Before two whole periods: (departs, why) from the moves the program made (the other
    ranks', and this member's before `count`; from the start too), or None where they
    cannot say. A move made before keeps to the loop (not the same call again: a run of
    one call may go on or end); a call no rank ever made departs; so does a move where,
    from the same call, the program only ever went elsewhere. A call made before is no
    evidence by itself (a skipped call goes on to a known one), nor is a move from a call
    the program never left yet (the first step's end)."""
    mine = calls[member]
    first = min(mine, default=count)
    steps = [_step(c) for k in range(first, count) if (c := mine.get(k))]
    here = mine.get(count)
    if here is None:  # no call where its loop went on, and blocked in none
        return (True, f"rank {member} made no call after {len(steps)}") if steps else None
    start = [START] if first == 1 else []
    before = [*start, *steps]
    moves = program.moves | set(pairwise(before))
    move = (before[-1], _step(here)) if before else None
    # one call again, made before, is no evidence either way: whether a run goes on or
    # ends is what is asked
    if move is not None and move in moves:
        return (False, "") if move[0] != move[1] else None
    others = {_step(c) for m, cs in calls.items() if m != member for c in cs.values()}
    # new only against members that made a call here too (else nobody has got this far)
    rivals = all(cs.get(count) is not None for m, cs in calls.items() if m != member)
    if rivals and _step(here) not in program.calls | others | set(steps):
        return True, f"rank {member} called what no rank called before"
    if move is not None and any(done[0] == move[0] for done in moves):
        return True, f"rank {member} went where, from its previous call, no rank went"
    return None
