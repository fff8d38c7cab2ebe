"""Generated DDP-like programs: most collectives come from C++ and leave no ledger line.

A world of 2-4 ranks. DDP's constructor issues 3 collectives, its reducer 1-2 bucket
all_reduces each backward, 2 more (the buckets rebuilt) in the second step (a backward
under no_sync issues none: nothing to see); the loop's Python calls are
1-2 all_reduces a step (a norm before the optimizer step, a loss after it), and in some
programs a p2p exchange with a neighbour (torch counts those too). One fault of a kind at
a random rank and step, in a Python call:

- skipped: the rank skips one of its Python all_reduces (its next collective, DDP's or
  the loop's, meets the others' skipped one);
- other size / extra: another size, or one more call from a new line;
- stuck: the rank stops before one of its calls.

tests/ledger_sim.py runs them; `case.beats` holds each rank's default-group op count.
"""

from __future__ import annotations

import random

from ledger_sim import Case, Step, run

KINDS = ("skipped", "other size", "extra", "stuck")


def _bucket(size: int) -> Step:
    return Step("collective", "0", "all_reduce", f"float32[{size}]", "", hidden=True)


def generate(rng: random.Random, kind: str) -> Case:
    world = rng.randint(2, 4)
    steps = rng.randint(3, 6)
    buckets = [rng.choice((90, 180, 42)) for _ in range(rng.randint(1, 2))]
    p2p = rng.random() < 0.3
    norm = Step("collective", "0", "all_reduce", "float32[4]", "t.py:40")
    loss = Step("collective", "0", "all_reduce", "float32[2]", "t.py:44")
    python = [norm, loss] if rng.random() < 0.6 else [loss]
    init = [Step("collective", "0", "broadcast", "float32[9]", "", hidden=True)] * 3

    def step(rank: int, k: int) -> list[Step]:
        body: list[Step] = []
        if p2p:  # exchange with a neighbour: the even ranks send first
            peer = rank ^ 1 if (rank ^ 1) < world else None
            if peer is not None:
                send = Step("send", op="send", what="float32[3]", where="t.py:30", peer=peer)
                recv = Step("recv", op="recv", what="float32[3]", where="t.py:31", peer=peer)
                body += [send, recv] if rank % 2 == 0 else [recv, send]
        body += [_bucket(b) for b in buckets]  # the backward (under no_sync: none)
        if k == 1:
            body += [Step("collective", "0", "broadcast", "int64[4]", "", hidden=True)] * 2
        body += python
        return body

    programs = {r: init + [c for k in range(steps) for c in step(r, k)] for r in range(world)}
    culprit = rng.randrange(world)
    program = programs[culprit]
    visible = [i for i, s in enumerate(program) if not s.hidden and s.kind == "collective"]
    at = rng.choice(visible)
    if kind == "skipped":
        del program[at]
    elif kind == "other size":
        s = program[at]
        program[at] = Step(s.kind, s.group, s.op, "float32[7]", s.where)
    elif kind == "extra":
        program.insert(at, Step("collective", "0", "all_reduce", "float32[2]", "t.py:99"))
    elif kind == "stuck":
        program.insert(rng.randrange(len(program)), Step("stuck"))
    case = Case(kind=kind, world=world, groups={"0": tuple(range(world))}, programs=programs,
                culprit=culprit)  # fmt: skip
    case.ledgers = run(case)
    return case
