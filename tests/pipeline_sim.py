"""Generated pipeline programs and the ledgers they leave (tests/ledger_sim.py's rules).

A case is a world of 2-6 stages in a LINE (activations 0 -> 1 -> ... -> W-1, gradients
back; the first stage only sends forward, the last only receives) or a RING (stage 0
sends first, every other stage receives first, the last sends back to stage 0), with
1-3 microbatches, an optional prologue of broadcasts, a world all_reduce at the end of
each step, and, in some programs, a call made only every other step (logging). One
fault of a chosen kind at a random stage, step and place:

- skipped send: a stage that sends skips one send (every microbatch of a step alike, or
  one), the others wait for it;
- p2p cycle: at one step every stage first receives from the one before it, from a new
  line (nobody sends): every stage is to blame;
- stuck: a stage stops before one of its calls (computing forever, blocked in none);
- other size: one stage's all_reduce of one step has another size;
- skipped periodic: a stage skips one of the every-other-step calls.

The ground truth is known by construction (the stage the fault is in; every stage for a
p2p cycle).
"""

from __future__ import annotations

import random

from ledger_sim import Case, Step, run

KINDS = ("skipped send", "p2p cycle", "stuck", "other size", "skipped periodic")


def _forward(rank: int, world: int, ring: bool, micro: int) -> list[Step]:
    last = world - 1
    steps = []
    for _ in range(micro):
        if ring:
            nxt, prv = (rank + 1) % world, (rank - 1) % world
            send = Step("send", op="send", what="float32[4, 8]", where="p.py:20", peer=nxt)
            if rank == 0:
                recv = Step("recv", op="recv", what="float32[4, 8]", where="p.py:21", peer=prv)
                steps += [send, recv]
            else:
                recv = Step("recv", op="recv", what="float32[4, 8]", where="p.py:23", peer=prv)
                steps += [recv, Step("send", op="send", what="float32[4, 8]", where="p.py:24",
                                     peer=nxt)]  # fmt: skip
            continue
        if rank > 0:
            steps.append(Step("recv", op="irecv", what="float32[2, 8]", where="p.py:30",
                              peer=rank - 1))  # fmt: skip
        if rank < last:
            steps.append(Step("send", op="isend", what="float32[2, 8]", where="p.py:33",
                              peer=rank + 1))  # fmt: skip
    return steps


def _backward(rank: int, world: int, micro: int) -> list[Step]:
    steps = []
    for _ in range(micro):
        if rank < world - 1:
            steps.append(Step("recv", op="irecv", what="float32[2, 8]", where="p.py:40",
                              peer=rank + 1))  # fmt: skip
        if rank > 0:
            steps.append(Step("send", op="send", what="float32[2, 8]", where="p.py:43",
                              peer=rank - 1))  # fmt: skip
    return steps


STATS = Step("collective", "0", "all_reduce", "float32[2]", "p.py:50")
LOG = Step("collective", "0", "all_reduce", "float32[1]", "p.py:52")


def _step(rank: int, world: int, ring: bool, micro: int, step: int, periodic: bool) -> list[Step]:
    body = _forward(rank, world, ring, micro)
    if not ring:
        body += _backward(rank, world, micro)
    body.append(STATS)
    if periodic and step % 2 == 1:
        body.append(LOG)
    return body


def generate(rng: random.Random, kind: str) -> Case:
    ring = kind == "p2p cycle" or rng.random() < 0.5
    world = rng.randint(3 if ring else 2, 6)
    micro = rng.randint(1, 3)
    steps = rng.randint(3, 6)
    periodic = kind == "skipped periodic" or rng.random() < 0.3
    prologue = [Step("collective", "0", "broadcast", f"float32[{n}]", "p.py:10")
                for n in (16, 16, 2)] if rng.random() < 0.5 else []  # fmt: skip
    steps_of = {
        r: [_step(r, world, ring, micro, s, periodic) for s in range(steps)] for r in range(world)
    }
    case = Case(kind=kind, world=world, groups={"0": tuple(range(world))}, programs={},
                culprit=None)  # fmt: skip
    culprit = rng.randrange(world)
    step = rng.randrange(steps)
    if kind == "p2p cycle":
        for r in range(world):
            first = Step("recv", op="recv", what="float32[4, 8]", where="p.py:60",
                         peer=(r - 1) % world)  # fmt: skip
            steps_of[r][step].insert(0, first)
        case.cycle = tuple(range(world))
    elif kind == "skipped send":
        culprit = rng.choice([r for r in range(world) if any(s.kind == "send" for s in
                                                            steps_of[r][step])])  # fmt: skip
        body = steps_of[culprit][step]
        sends = [i for i, s in enumerate(body) if s.kind == "send"]
        if rng.random() < 0.5:  # one send
            del body[rng.choice(sends)]
        else:  # every send of that line in the step
            line = body[rng.choice(sends)].where
            body[:] = [s for s in body if not (s.kind == "send" and s.where == line)]
    elif kind == "stuck":
        body = steps_of[culprit][step]
        body.insert(rng.randrange(len(body)), Step("stuck"))
    elif kind == "other size":
        body = steps_of[culprit][step]
        at = body.index(STATS)
        body[at] = Step("collective", "0", "all_reduce", "float32[3]", STATS.where)
    elif kind == "skipped periodic":
        step = rng.choice([s for s in range(steps) if s % 2 == 1])
        steps_of[culprit][step].remove(LOG)
    case.culprit = None if kind == "p2p cycle" else culprit
    case.programs = {r: prologue + [c for s in steps_of[r] for c in s] for r in range(world)}
    case.ledgers = run(case)
    return case
