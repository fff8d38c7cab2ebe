"""Each rank's own loop (diagnose/own_loop.py) on generated pipelines (tests/pipeline_sim.py):
a line or a ring of 2-6 stages, 1-3 microbatches, sends and receives, a prologue, a call
made every other step; a stage skips a send, stops, calls another size, skips the
periodic call, or every stage receives first. The ledgers go through the arbiter
(ledger_items + decide), as a real job's would.

Measured with this seed (150 cases a kind): never an innocent rank. Before the own-loop
rule, a skipped send of a pipeline read as a deadlock of the whole cycle: 181 of 300 such
cases named innocent stages (the same generator, the engine at bad34cd).
"""

from __future__ import annotations

import random

import pipeline_sim
import pytest
from ledger_sim import judged

from safelaunch.diagnose.arbiter import decide
from safelaunch.diagnose.ledger_items import items_of_ledgers
from safelaunch.diagnose.own_loop import START, keeps, predict
from safelaunch.rundir.calls_file import Call, CallKind, CallLedger, Group

CASES = 150
# the share a kind must name at least (measured with this seed: skipped send 0.39, stuck
# 0.83, other size 0.99, skipped periodic 0.20, p2p cycle 1.00): the rest are faults in a
# loop's first steps, where a stage's own loop cannot say yet, and name nobody
RECALL = {
    "skipped send": 0.3,
    "p2p cycle": 0.95,
    "stuck": 0.7,
    "other size": 0.9,
    "skipped periodic": 0.15,
}


def _tokens(*names: str) -> list[tuple[str, ...]]:
    return [START, *((n,) for n in names)]


def _keeps(seen: list[str], call: str) -> bool | None:
    """own_loop.keeps over a ledger of collectives named `seen`, then `call`."""
    calls = [
        Call(n=n, kind=CallKind.COLLECTIVE, op=name, group="0", count=n, done=True)
        for n, name in enumerate([*seen, call], start=1)
    ]
    ledger = CallLedger(rank=0, groups=(Group(name="0", ranks=(0, 1)),), calls=tuple(calls))
    return keeps(ledger, calls[-1])


def test_the_loop_is_the_longest_context_seen_before() -> None:
    assert predict(_tokens("a", "b", "c", "a", "b", "c", "a", "b")) == ("c",)
    # a microbatch's two receives, then the step's end: what followed them last time
    assert predict(_tokens("r", "r", "s", "s", "ar", "r", "r", "s", "s")) == ("ar",)
    # every other step logs: the step that logs follows one that did not
    assert predict(_tokens("a", "b", "a", "a", "b", "a", "a", "b", "a")) == ("a",)


def test_where_the_loop_cannot_say_there_is_no_prediction() -> None:
    assert predict(_tokens("a", "b", "c")) is None  # the first step
    # from the same context "c a" it went on to x once, to y once: it branches there
    assert predict(_tokens("c", "a", "x", "c", "a", "y", "c", "a")) is None


def test_a_departure_needs_the_time_before_to_agree() -> None:
    """Keeping is doing what followed last time; departing needs two earlier times alike:
    a loop's second step may differ from the rest (a warm-up, a branch taken once)."""
    assert _keeps(["a", "b", "c", "a"], "b") is True
    assert _keeps(["a", "b", "c", "a"], "c") is None  # once is not a loop
    assert _keeps(["a", "b", "c", "a", "b", "c", "a"], "c") is False
    # DDP's second step rebuilds its buckets: after it, the third step is no departure
    warm = ["X", "X", "X", "X", "s", "X", "X", "X", "s", "X"]
    assert _keeps(warm, "s") is None
    assert _keeps(warm, "X") is True


def test_a_run_of_one_call_going_on_keeps_leaving_it_is_no_departure() -> None:
    """One all_reduce a step, the same broadcast for each parameter at start: whether the
    run goes on or ends was never seen. Going on keeps (the uneven-data rank that runs one
    more step); leaving is no departure (the last parameter's broadcast)."""
    assert _keeps(["s", "s", "s", "s"], "s") is True
    assert _keeps(["b", "b", "b", "b"], "all_gather") is None


@pytest.mark.parametrize("kind", pipeline_sim.KINDS)
def test_a_generated_pipeline_fault_never_names_an_innocent_stage(kind: str) -> None:
    rng = random.Random(f"24-{kind}")
    found, wrong = judged([pipeline_sim.generate(rng, kind) for _ in range(CASES)])
    assert wrong == []
    assert found >= RECALL[kind] * CASES, f"{kind}: {found} of {CASES}"


def _ring(world: int, skip_step: int | None, steps: int, cycle_step: int | None = None):
    """The classic template's ring: rank 0 sends then receives, the others receive then
    send, then an all_reduce; rank 0 skips its send at `skip_step`; or every stage
    receives first at `cycle_step` (from one new line)."""
    programs = {}
    for r in range(world):
        nxt, prv = (r + 1) % world, (r - 1) % world
        calls = []
        for step in range(steps):
            if step == cycle_step:
                calls.append(("recv", prv, "t.py:82"))
            if r == 0:
                calls += [("send", nxt, "t.py:84")] if step != skip_step else []
                calls.append(("recv", prv, "t.py:85"))
            else:
                calls += [("recv", prv, "t.py:87"), ("send", nxt, "t.py:88")]
            calls.append(("all_reduce", None, "t.py:93"))
        programs[r] = calls
    return programs


def _run_until_stuck(programs: dict[int, list[tuple[str, int | None, str]]]):
    from ledger_sim import Case, Step, run

    world = len(programs)
    steps = {
        r: [
            Step("stuck")
            if op == "stuck"
            else Step("collective", "0", op, "float32[2]", where)
            if peer is None
            else Step(op, op=op, what="float32[4, 8]", where=where, peer=peer)
            for op, peer, where in calls
        ]
        for r, calls in programs.items()
    }
    case = Case(kind="", world=world, groups={"0": tuple(range(world))}, programs=steps,
                culprit=None)  # fmt: skip
    return run(case)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_a_ring_stage_that_skips_its_send_early_is_one_of_them_later_itself(
    world: int,
) -> None:
    """docs/benchmarks.md's skip_collective:680844: every stage then waits in a receive,
    which read as a p2p deadlock of all three. At step 0 no loop says whose receive is
    out of place ("one of these"); from the fourth step, where rank 0's loop went from
    the all_reduce to its send twice before, its own loop names it."""
    for step in (0, 1, 2):
        early = decide(items_of_ledgers(_run_until_stuck(_ring(world, step, 6))))
        assert early.culprits == () and early.disagreeing[0].ambiguous
    for step in (3, 5):
        later = decide(items_of_ledgers(_run_until_stuck(_ring(world, step, 6))))
        assert later.culprits == (0,), later


@pytest.mark.parametrize("step", [0, 1, 3])
def test_a_true_p2p_cycle_names_every_stage_from_the_first_step(step: int) -> None:
    verdict = decide(items_of_ledgers(_run_until_stuck(_ring(3, None, 4, cycle_step=step))))
    assert verdict.culprits == (0, 1, 2), verdict


def _ledger(rank: int, calls: list[Call]) -> CallLedger:
    return CallLedger(rank=rank, groups=(Group(name="0", ranks=(0, 1)),), calls=tuple(calls))


@pytest.mark.parametrize("late", [0, 1])
def test_two_ranks_one_waits_in_its_loop_s_call_the_other_never_came(late: int) -> None:
    """1:1, the wait-for graph alone cannot say which side departed: the waiter receives
    as it did every step before, so the rank it waits for (asleep, computing) is named."""
    waiter = 1 - late
    step = [("send", "t.py:20"), ("recv", "t.py:21"), ("all_reduce", "t.py:25")]
    calls: dict[int, list[Call]] = {0: [], 1: []}
    for rank in (waiter, late):
        for i, (op, where) in enumerate(step * 3):
            n = i + 1
            kind = CallKind.COLLECTIVE if op == "all_reduce" else CallKind.P2P
            peer = None if kind == CallKind.COLLECTIVE else 1 - rank
            if rank == 1 and kind == CallKind.P2P:
                op = "recv" if op == "send" else "send"
            calls[rank].append(Call(n=n, kind=kind, op=op, group="0", peer=peer, where=where,
                                    count=n // 3 if kind == CallKind.COLLECTIVE else None,
                                    done=True))  # fmt: skip
    # the waiter's next step: its first p2p call, with a peer that never came
    first = calls[waiter][0]
    pending = Call(**{**first.as_dict(), "n": len(calls[waiter]) + 1, "done": False,
                      "blocked": True})  # type: ignore[arg-type]  # fmt: skip
    calls[waiter].append(pending)
    ledgers = {r: _ledger(r, c) for r, c in calls.items()}
    assert decide(items_of_ledgers(ledgers)).culprits == (late,)


@pytest.mark.parametrize("seed", range(4))
def test_a_rank_seen_elsewhere_when_the_first_timed_out_is_the_one_waited_for(seed: int) -> None:
    """1:1 in the first step, no loop to keep to yet: the stage stuck before its first
    send is named where its stack was outside any call when the waiting one timed out;
    a rank seen elsewhere that nobody waits for is never named."""
    rng = random.Random(seed)
    cases = [pipeline_sim.generate(rng, "stuck") for _ in range(60)]
    for case in cases:
        truth = case.culprit
        others = [r for r in range(case.world) if r != truth]
        busy = [truth, *rng.sample(others, rng.randint(0, len(others)))]  # computing too
        verdict = decide(items_of_ledgers(case.ledgers, elsewhere=busy))
        assert set(verdict.culprits) <= {truth}, (case.world, truth, busy, verdict)
    # two stages, the first asleep before its first send: nobody has a loop yet
    programs = _ring(2, None, 3)
    ledgers = _run_until_stuck({0: [("stuck", None, "")], 1: programs[1]})
    assert decide(items_of_ledgers(ledgers)).culprits == ()
    assert decide(items_of_ledgers(ledgers, elsewhere=[0])).culprits == (0,)
    assert decide(items_of_ledgers(ledgers, elsewhere=[1])).culprits == ()  # it waits
