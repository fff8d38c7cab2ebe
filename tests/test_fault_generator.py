"""The fault generator (bench/faultgen): its ground truth agrees with the script it wrote.

Pure and fast: scripts are generated and compiled, never run (tests/test_culprit_faults.py
runs a sample under safelaunch; bench/culprits.py runs hundreds under both launchers).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from safelaunch.vocab import FailureClass

BENCH = Path(__file__).parent.parent / "bench"
sys.path[:0] = [str(BENCH / "faultgen"), str(BENCH / "faults")]

import fault_gen  # noqa: E402
import fault_templates  # noqa: E402
import fault_templates_wide  # noqa: E402
from fault_gen import KINDS, generate  # noqa: E402

SEEDS = range(40)
CASES = [generate(kind, seed) for kind in KINDS for seed in SEEDS]
# the wide suite: other loops, collectives, layouts and the kinds added with it
WIDE = [
    generate(kind, seed, "wide")
    for kind in fault_gen.ALL_KINDS
    if fault_gen.templates_for(kind, "wide")
    for seed in range(25)
]


def _line(case: fault_gen.Generated) -> str:
    name, number = case.truth.location.split(":")
    return case.files[name].splitlines()[int(number) - 1]


@pytest.mark.parametrize("kind", fault_gen.ALL_KINDS)
def test_every_script_compiles_and_keeps_no_annotation(kind: str) -> None:
    for case in (c for c in CASES + WIDE if c.truth.kind == kind):
        for name, text in case.files.items():
            compile(text, name, "exec")
            assert "#@" not in text, (case.truth.case_id, name)


def test_the_truth_points_at_the_injected_line() -> None:
    for case in CASES + WIDE:
        truth = case.truth
        line = _line(case)
        if truth.kind == "lingering_thread":  # where the thread waits once the script ends
            assert line.strip() == "time.sleep(0.2)", truth
            assert truth.detail in case.files[fault_gen.SCRIPT], truth
        else:
            assert line.strip() == truth.detail, truth
        assert "_moment()" in truth.detail, truth  # the fault records its moment


def test_the_culprits_are_the_ranks_the_fault_line_guards() -> None:
    for case in CASES + WIDE:
        truth = case.truth
        assert set(truth.culprits) <= set(range(truth.world)), truth
        guarded = re.search(r"\b(?:RANK|rank) == (\d+)", truth.detail)
        if truth.kind == "p2p_cycle":  # every stage receives first
            assert guarded is None and truth.culprits == tuple(range(truth.world)), truth
        else:
            assert guarded and truth.culprits == (int(guarded[1]),), truth
            assert set(truth.culprits) <= set(truth.group), truth
        assert re.search(rf"\bstep == {truth.step}\b|when == {truth.step}\b|"
                         rf"index // BATCH == {truth.step}\b|STEP\[0\] == {truth.step}\b",
                         truth.detail), truth  # fmt: skip


def test_a_send_is_skipped_only_by_a_rank_that_runs_it() -> None:
    skips = [
        c for c in CASES if c.truth.kind == "skip_collective" and "dist.send" in c.truth.detail
    ]
    assert skips
    for case in skips:
        first = "x.contiguous()" in case.truth.detail  # the send inside `if RANK == 0:`
        assert (case.truth.culprits == (0,)) == first, case.truth


def test_classes_are_vocab_words() -> None:
    words = {member.value for member in FailureClass}
    assert {case.truth.klass for case in CASES + WIDE} <= words
    # every class a generated fault can have is reached
    assert {case.truth.klass for case in CASES} == words - {"environment/launch"}


def test_every_kind_and_template_is_reachable() -> None:
    assert {kind for kind, _ in fault_gen.sample(len(KINDS), 1)} == set(KINDS)
    assert {c.truth.template for c in CASES} == set(fault_templates.LOOPS)
    exceptions = [c for c in CASES if c.truth.kind == "exception"]
    # raised from every layer: forward, __getitem__, loss, optimizer step, the helper
    layers = {c.truth.location.split(":")[0] for c in exceptions}
    assert layers == {fault_gen.SCRIPT, fault_gen.HELPER}
    assert {c.truth.klass for c in exceptions} == {"model/gradient", "data/sampling"}
    assert any(c.truth.template == "loader" and "index" in c.truth.detail for c in exceptions)
    signals = {re.search(r"SIG\w+", c.truth.detail)[0] for c in CASES if c.truth.kind == "signal"}  # type: ignore[index]
    assert signals == set(fault_gen.SIGNALS)
    groups = {c.truth.group for c in CASES if c.truth.template == "subgroups"}
    assert {(0, 1), (2, 3), (0, 2), (1, 3)} <= groups  # faults inside the subgroups


def test_the_same_seed_writes_the_same_script() -> None:
    again = generate("exception", 5)
    assert again == generate("exception", 5)
    scripts = {generate("exception", seed).files[fault_gen.SCRIPT] for seed in SEEDS}
    assert len(scripts) > len(SEEDS) // 2
    assert fault_gen.sample(30, 7) == fault_gen.sample(30, 7) != fault_gen.sample(30, 8)


def test_a_group_timeout_case_pauses_past_its_own_short_timeout() -> None:
    for case in (c for c in CASES if c.truth.kind == "group_timeout"):
        assert case.truth.group_timeout == fault_gen.SHORT_TIMEOUT < fault_gen.PAUSE
        assert f"timedelta(seconds={fault_gen.SHORT_TIMEOUT})" in case.files[fault_gen.SCRIPT]


def test_the_classic_cases_are_the_ones_written_before_the_wide_suite() -> None:
    """Adding templates and kinds changed no classic KIND:SEED (docs/benchmarks.md cites
    some by name): the three wrong ones of 2026-12-02 and one more of two kinds."""
    pinned = {
        ("skip_collective", 680844): ("pipeline", 3, (0,), "train.py:84", 0),
        ("skip_collective", 417815): ("ddp", 2, (0,), "train.py:87", 1),
        ("size_mismatch", 5): ("loader", 2, (0,), "train.py:84", 2),
        ("p2p_cycle", 9): ("pipeline", 3, (0, 1, 2), "train.py:83", 1),
    }
    for (kind, seed), expected in pinned.items():
        t = generate(kind, seed).truth
        assert (t.template, t.world, t.culprits, t.location, t.step) == expected
        assert t.case_id == f"{kind}:{seed}" and t.suite == "classic"
    assert fault_gen.sample(3, 777) == [(k, s) for k, s in fault_gen.sample(3, 777)]
    assert {c.truth.template for c in CASES} == set(fault_templates.LOOPS)


def test_the_wide_suite_reaches_every_template_kind_and_layout() -> None:
    assert {c.truth.template for c in WIDE} == set(fault_templates_wide.LOOPS)
    assert {c.truth.kind for c in WIDE} == set(fault_gen.ALL_KINDS)
    assert {c.truth.world for c in WIDE} == {2, 3, 4, 6, 8}
    grid = {c.truth.group for c in WIDE if c.truth.template == "grid"}
    # rows of 3 and 4 ranks, columns of 2, of grids of 6 and 8
    assert {len(g) for g in grid} == {2, 3, 4, 6, 8}
    # faults in the comm.py class's methods, in a backward, in a DataLoader worker
    assert any(c.truth.location.startswith(fault_gen.wide.COMM) for c in WIDE)
    assert {c.truth.klass for c in WIDE if c.truth.kind == "backward_exception"} == {
        "model/gradient"
    }
    killed = [c for c in WIDE if c.truth.kind == "worker_killed"]
    assert killed and all(fault_gen._workers(c.truth.template) for c in killed)
    # a skipped send of a line pipeline, by a rank that runs it
    sends = [c for c in WIDE if c.truth.kind == "skip_collective" and "isend" in c.truth.detail]
    assert sends and all(c.truth.culprits[0] < c.truth.world - 1 for c in sends)


def test_a_case_id_replays_its_own_case() -> None:
    for case in CASES[::37] + WIDE[::23]:
        suite, kind, seed = fault_gen.case_of(case.truth.case_id)
        assert generate(kind, seed, suite) == case
