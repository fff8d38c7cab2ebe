"""A small engine that generates faulty training loops and the call ledgers they leave.

A case is a world of 2-8 ranks, the default group plus a partition into subgroups (as
tensor parallelism makes them), and a loop of steps, each step a few collectives on the
world or on the rank's own subgroup. One fault of a chosen kind is put at a random rank,
step and call; the programs then run under Gloo-like rules until nothing can move:

- the k-th collective of a group completes when every member has issued its k-th there,
  and only if they all called the same op with the same dtype[shape] (else they stay
  blocked, as a mismatch that hangs);
- a send and its matching receive (the j-th each way between two ranks) complete together;
- a rank that is stuck (in data loading, say) stops issuing calls and is blocked in none.

The result is what the ranks' ledgers would hold at that moment, with the ground truth
(the culprit; for a p2p cycle, the ranks in it) known by construction.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from safelaunch.rundir.calls_file import Call, CallKind, CallLedger, Group

KINDS = ("skipped", "extra", "other size", "other dtype", "stuck", "p2p cycle")
OPS = ("all_reduce", "broadcast", "all_gather")
SHAPES = ("[4]", "[8]", "[2, 3]", "[16]")
DTYPES = ("float32", "bfloat16", "int64")
SENDS = ("send", "isend")


@dataclass(frozen=True)
class Step:
    """One call of a program: a collective on a group, a send/recv with a peer, or stuck."""

    kind: str  # "collective", "send", "recv", "stuck"
    group: str = "0"
    op: str = ""
    what: str = ""
    where: str = ""
    peer: int | None = None
    hidden: bool = False  # a collective from C++ (DDP's): torch counts it, no ledger line


@dataclass
class Case:
    kind: str
    world: int
    groups: dict[str, tuple[int, ...]]
    programs: dict[int, list[Step]]
    culprit: int | None  # None for a p2p cycle: nobody is to blame alone
    cycle: tuple[int, ...] = ()
    ledgers: dict[int, CallLedger] = field(default_factory=dict)
    # the default group's collectives each rank issued, as its flight record counts them
    beats: dict[int, int] = field(default_factory=dict)


def generate(rng: random.Random, kind: str) -> Case:
    world = rng.randint(3 if kind == "p2p cycle" else 2, 8)
    groups, own = _layout(rng, world)
    body = [_body_call(rng, line) for line in range(10, 10 + rng.randint(1, 3))]
    steps = rng.randint(3, 6)
    programs = {r: _program(body, steps, own[r]) for r in range(world)}
    case = Case(kind=kind, world=world, groups=groups, programs=programs, culprit=None)
    if kind == "p2p cycle":
        _add_cycle(rng, case, len(body) * rng.randint(1, steps))
    else:
        _add_fault(rng, case, body, own)
    case.ledgers = run(case)
    return case


def _layout(rng: random.Random, world: int) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """The default group "0" and subgroups "1".. of 2-4 ranks covering the world."""
    groups: dict[str, tuple[int, ...]] = {"0": tuple(range(world))}
    own = ["0"] * world
    ranks = list(range(world))
    start = 0
    while start < world:
        size = min(rng.randint(2, 4), world - start)
        if world - start - size == 1:  # no subgroup of one
            size += 1
        name = str(len(groups))
        groups[name] = tuple(ranks[start : start + size])
        for r in groups[name]:
            own[r] = name
        start += size
    return groups, own


def _body_call(rng: random.Random, line: int) -> tuple[bool, str, str, str]:
    """(on the world?, op, dtype[shape], where) of one call of the loop's body."""
    what = f"{rng.choice(DTYPES)}{rng.choice(SHAPES)}"
    return rng.random() < 0.5, rng.choice(OPS), what, f"train.py:{line}"


def _program(body: list[tuple[bool, str, str, str]], steps: int, own: str) -> list[Step]:
    return [
        Step("collective", "0" if on_world else own, op, what, where)
        for _ in range(steps)
        for on_world, op, what, where in body
    ]


def _add_fault(
    rng: random.Random, case: Case, body: list[tuple[bool, str, str, str]], own: list[str]
) -> None:
    culprit = rng.randrange(case.world)
    program = case.programs[culprit]
    at = rng.randrange(len(program))
    call = program[at]
    if case.kind == "skipped":
        del program[at]
    elif case.kind == "extra":
        on_world = rng.random() < 0.5
        op, what = (call.op, call.what) if rng.random() < 0.5 else (rng.choice(OPS), "float32[3]")
        group = "0" if on_world else own[culprit]
        program.insert(at, Step("collective", group, op, what, "train.py:99"))
    elif case.kind == "other size":
        what = call.what.split("[")[0] + "[5, 5]"
        program[at] = Step(call.kind, call.group, call.op, what, call.where)
    elif case.kind == "other dtype":
        dtype, shape = call.what.split("[", 1)
        other = rng.choice([d for d in DTYPES if d != dtype])
        program[at] = Step(call.kind, call.group, call.op, f"{other}[{shape}", call.where)
    elif case.kind == "stuck":
        program.insert(at, Step("stuck"))
    case.culprit = culprit


def _add_cycle(rng: random.Random, case: Case, at: int) -> None:
    """Some ranks each receive from the one before them first, then send on: nobody sends."""
    ring = sorted(rng.sample(range(case.world), rng.randint(2, case.world)))
    for i, r in enumerate(ring):
        before, after = ring[i - 1], ring[(i + 1) % len(ring)]
        case.programs[r][at:at] = [
            Step("recv", "0", "recv", "float32[8]", "train.py:30", peer=before),
            Step("send", "0", "send", "float32[8]", "train.py:31", peer=after),
        ]
    case.cycle = tuple(ring)


def run(case: Case) -> dict[int, CallLedger]:
    """Run the programs until nothing moves; each rank's ledger at that moment."""
    issued: dict[int, list[Call]] = {r: [] for r in range(case.world)}
    done: set[tuple[int, int]] = set()  # (rank, call number)
    hidden: set[tuple[int, int]] = set()
    pc = dict.fromkeys(range(case.world), 0)
    moved = True
    while moved:
        moved = False
        for r in range(case.world):
            waiting = issued[r] and (r, issued[r][-1].n) not in done
            program = case.programs[r]
            if waiting or pc[r] >= len(program) or program[pc[r]].kind == "stuck":
                continue
            issued[r].append(_issue(program[pc[r]], issued[r]))
            if program[pc[r]].hidden:
                hidden.add((r, issued[r][-1].n))
            pc[r] += 1
            moved = True
        moved |= _complete(case, issued, done)
    case.beats = {  # the flight record's count: the default group's collectives
        r: sum(1 for c in calls if c.group == "0" and c.kind == CallKind.COLLECTIVE)
        for r, calls in issued.items()
    }
    return {
        r: CallLedger(
            rank=r,
            groups=tuple(Group(name=g, ranks=m) for g, m in case.groups.items() if r in m),
            calls=_written([c for c in calls if (r, c.n) not in hidden], r, done),
        )
        for r, calls in issued.items()
    }


def _written(calls: list[Call], rank: int, done: set[tuple[int, int]]) -> tuple[Call, ...]:
    """What the rank's ledger holds: its Python calls, numbered and counted without the
    hidden ones (their seq, torch's count, still counts them)."""
    written = []
    counts: dict[str, int] = {}
    for n, call in enumerate(calls, start=1):
        fields = call.as_dict()
        if call.count is not None:
            counts[call.group] = counts.get(call.group, 0) + 1
            fields["count"] = counts[call.group]
        finished = (rank, call.n) in done
        fields.update(n=n, done=finished, blocked=not finished)
        written.append(Call(**fields))  # type: ignore[arg-type]
    return tuple(written)


def _issue(step: Step, before: list[Call]) -> Call:
    n = len(before) + 1
    seq = sum(1 for c in before if c.group == step.group)  # torch counts p2p calls too
    if step.kind == "collective":
        count = 1 + sum(1 for c in before if c.count is not None and c.group == step.group)
        kind, peer = CallKind.COLLECTIVE, None
    else:
        count, kind, peer = None, CallKind.P2P, step.peer
    return Call(
        n=n,
        kind=kind,
        op=step.op,
        group=step.group,
        count=count,
        seq=seq,
        peer=peer,
        what=step.what,
        where=step.where,
    )


def _complete(case: Case, issued: dict[int, list[Call]], done: set[tuple[int, int]]) -> bool:
    moved = False
    for r, calls in issued.items():
        if not calls or (r, calls[-1].n) in done:
            continue
        last = calls[-1]
        if last.kind == CallKind.COLLECTIVE:
            members = case.groups[last.group]
            mates = [_nth(issued[m], last.group, last.count) for m in members]
            if all(m is not None and m.signature() == last.signature() for m in mates):
                done.update((m, c.n) for m, c in zip(members, mates, strict=True) if c)
                moved = True
        elif last.peer is not None:
            partner = _partner(issued, r, last)
            if partner is not None:
                done.update({(r, last.n), (last.peer, partner.n)})
                moved = True
    return moved


def _nth(calls: list[Call], group: str, count: int | None) -> Call | None:
    return next((c for c in calls if c.group == group and c.count == count), None)


def _partner(issued: dict[int, list[Call]], rank: int, call: Call) -> Call | None:
    """The peer's matching call, when it is its last (pending) one: the j-th each way."""
    assert call.peer is not None
    sending = call.op in SENDS
    mine = [c for c in issued[rank] if c.peer == call.peer and (c.op in SENDS) == sending]
    theirs = [c for c in issued[call.peer] if c.peer == rank and (c.op in SENDS) != sending]
    j = mine.index(call)
    return theirs[j] if j < len(theirs) else None


def judged(cases: list[Case], fill: bool = False) -> tuple[int, list[str]]:
    """The arbiter over each case's ledgers (with the unseen calls put back: `fill`): how
    many name a culprit, and the cases that name an innocent rank."""
    from safelaunch.diagnose.arbiter import decide
    from safelaunch.diagnose.ledger_items import items_of_ledgers
    from safelaunch.diagnose.unseen_calls import with_unseen

    found, wrong = 0, []
    for case in cases:
        flights = {r: {"0": n} for r, n in case.beats.items()}  # taken together
        ledgers = with_unseen(case.ledgers, flights) if fill else case.ledgers
        verdict = decide(items_of_ledgers(ledgers))
        truth = set(case.cycle) if case.culprit is None else {case.culprit}
        if set(verdict.culprits) - truth:
            wrong.append(f"world {case.world}, culprit {case.culprit}: {verdict.decided_by}")
        found += bool(verdict.culprits)
    return found, wrong
