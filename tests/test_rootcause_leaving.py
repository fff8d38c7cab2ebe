"""Root-cause rules for faults the zoo did not have: a rank that destroys its group and
works on, a rank that ran its loop fewer times and waits after it, a rank that exits
with a code of its own after printing why.

Table tests on the pure rules (rootcause.py, leaving.py, hang.py), then one real 2-rank
Gloo launch per case: culprit, class, the key line, the exit code, and `safelaunch
explain` saying the same as the live summary.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import builders
import pytest
from conftest import launch, worker
from test_fault_zoo import _cause_block, _explained

from safelaunch.diagnose import hang_class
from safelaunch.diagnose.leaving import Leave, leave_from_record, leave_record, read_leaves
from safelaunch.diagnose.rootcause import RankEvidence, find_root_cause
from safelaunch.hangs.analysis import HangAnalysis, Whereabouts
from safelaunch.hangs.loops import uneven_reason
from safelaunch.rank import beat, names

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
CLOSED = (FIXTURES / "peer-connection-closed.log").read_text()
AT = "/u/train.py:9 in <module>"


_rank = builders.rank_evidence


def _leave(how: str, code: int | str | None = None, left_at: int | None = None) -> Leave:
    return Leave(rank=1, how=how, code=code, location=AT, seq=left_at, left_at=left_at)


def _exited(code: int, text: str) -> RankEvidence:
    """Rank 1 called sys.exit(code) after printing `text`."""
    return _rank(1, text=text, failed=True, code=code, leave=_leave("sys.exit", code))


SURVIVOR = _rank(0, text=CLOSED, failed=True, ended=2.0, code=1)

# (rank 1's evidence; then: root rank, left early, class, error line starts with)
ROOT_CASES = {
    "destroyed, alive until stopped": (
        _rank(1, ended=None, leave=_leave("destroy_process_group", left_at=3)),
        (1, True, "data/sampling", "destroy_process_group() after collective #3"),
    ),
    "destroyed, its count unknown": (
        _rank(1, ended=None, leave=_leave("destroy_process_group")),
        (1, True, "data/sampling", "destroy_process_group() while the other ranks"),
    ),
    "destroyed, exited 0 after the peer failed": (
        _rank(1, ended=3.0, code=0, leave=_leave("returned", 0, left_at=3)),
        (1, True, "data/sampling", "destroy_process_group() after collective #3"),
    ),
    "exited 0 after the peer failed, group kept": (
        _rank(1, ended=3.0, code=0, leave=_leave("returned", 0)),
        (0, False, "unknown", "RuntimeError"),
    ),
    "sys.exit(0) first": (
        _rank(1, ended=1.0, code=0, leave=_leave("sys.exit", 0)),
        (1, True, "data/sampling", "SystemExit: sys.exit(0) while the other ranks"),
    ),
    "sys.exit(3) after an error message": (
        _exited(3, "loading shards\nERROR: shard list /x/shards.txt not found\n"),
        (1, False, "unknown", "ERROR: shard list /x/shards.txt not found"),
    ),
    "sys.exit(2) after a message a signature knows": (
        _exited(2, "fatal: could not write the checkpoint: No space left on device\n"),
        (1, False, "resources", "fatal: could not write the checkpoint"),
    ),
    # MAE / DeiT: `print("Loss is {}, stopping training"); sys.exit(1)`: no exception at all
    "sys.exit(1) after a NaN loss line": (
        _exited(1, "step 2 loss nan\nLoss is nan, stopping training\n"),
        (1, False, "model/gradient", "Loss is nan, stopping training"),
    ),
    "sys.exit('message')": (
        _rank(1, text="bad config: lr < 0\n", failed=True, code=1, leave=_leave("sys.exit", "x")),
        (1, False, "unknown", "bad config: lr < 0"),
    ),
    "sys.exit(5), nothing printed": (
        _rank(1, failed=True, code=5, leave=_leave("sys.exit", 5)),
        (1, False, "unknown", "SystemExit: sys.exit(5)"),
    ),
    "no code known, no error (a combined log)": (
        _rank(1, text="epoch 3 done\n", failed=True, code=None),
        (1, True, "data/sampling", None),
    ),
}


@pytest.mark.parametrize("name", list(ROOT_CASES))
def test_who_left_and_who_failed(name: str) -> None:
    rank1, (rank, left, klass, error) = ROOT_CASES[name]
    root = find_root_cause([SURVIVOR, rank1])
    assert root is not None
    assert (root.rank, root.left_early, root.klass) == (rank, left, klass), root
    if error is None:
        assert root.error is None
    else:
        assert root.error is not None and root.error.line.startswith(error), root.error
    if rank == 1:  # the survivor only followed it
        assert root.consequences == ((0, "peer-connection-closed"),)
        if root.error is not None:
            assert root.error.location == AT
    if rank == 1 and not left:  # its own failure: none of the uneven-data advice
        assert root.signature is None or root.signature.id != "rank-left-early"


def test_a_real_error_still_wins_over_a_rank_that_destroyed_its_group() -> None:
    error = 'Traceback (most recent call last):\n  File "/u/t.py", line 3, in f\nKeyError: 1\n'
    ranks = [
        _rank(0, text=error, failed=True, ended=1.0, code=1),
        _rank(1, ended=None, leave=_leave("destroy_process_group", left_at=2)),
    ]
    root = find_root_cause(ranks)
    assert root is not None and root.rank == 0 and not root.left_early


def test_the_destroy_is_kept_in_the_exit_record_and_in_report_json(tmp_path: Path) -> None:
    record = {
        "how": "returned",
        "code": 0,
        "frames": [["/u/train.py", 9, "<module>"], ["<string>", 1, "<module>"]],
        "time": 1.0,
        "seq": 3,
        "left_at": 3,
    }
    (tmp_path / "rank1.exit.json").write_text(json.dumps(record))
    leave = read_leaves(tmp_path)[1]
    assert (leave.how, leave.left_at, leave.seq, leave.location) == ("returned", 3, 3, AT)
    assert leave_from_record(1, json.loads(json.dumps(leave_record(leave)))) == leave
    older = {"how": "sys.exit", "code": 0, "location": AT, "seq": 4}  # before left_at
    assert leave_from_record(1, older).left_at is None


# --- hangs: a loop the ranks ran a different number of times ----------------------

SOURCES = {
    # the audit's: rank 1 runs out of batches and waits in the barrier after the loop
    "after the loop": (
        "import torch.distributed as dist\n"  # 1
        "n = 10 if dist.get_rank() == 0 else 9\n"  # 2
        "for i in range(n):\n"  # 3
        "    dist.all_reduce(x)\n"  # 4
        "dist.barrier()\n",  # 5
        (4, 5),
    ),
    # a collective on one rank only, inside the loop: a mismatch, not uneven data
    "in the loop, on a rank condition": (
        "for step in range(3):\n"  # 1
        "    if rank == 1 and step == 1:\n"  # 2
        "        dist.barrier()\n"  # 3
        "    else:\n"  # 4
        "        dist.all_reduce(x)\n",  # 5
        (5, 3),
    ),
    # the loop itself only on one rank: a mismatch too
    "a loop entered on a rank condition": (
        "if rank == 0:\n"  # 1
        "    for i in range(3):\n"  # 2
        "        dist.all_reduce(x)\n"  # 3
        "dist.barrier()\n",  # 4
        (3, 4),
    ),
    "two collectives in a row, no loop": (
        "dist.all_reduce(x)\n"  # 1
        "dist.barrier()\n",  # 2
        (1, 2),
    ),
    "nested loops: the inner one ended": (
        "def main():\n"  # 1
        "    for epoch in range(2):\n"  # 2
        "        while batches:\n"  # 3
        "            dist.all_reduce(batches.pop())\n"  # 4
        "        dist.all_reduce(loss)\n",  # 5
        (4, 5),
    ),
}
UNEVEN = {"after the loop", "nested loops: the inner one ended"}


def _group(
    rank: int, path: Path, frames: tuple[tuple[int, str], ...], seq: int = 10, waiting: bool = True
) -> Whereabouts:
    stack = tuple((str(path), line, func) for line, func in frames)
    return Whereabouts(
        ranks=(rank,),
        activity="all_reduce" if rank == 0 else "barrier",
        location=f"{path}:{frames[0][0]} in {frames[0][1]}",
        waiting=waiting,
        seqs=(seq,),
        frozen=None,
        frames=stack,
    )


@pytest.mark.parametrize("name", list(SOURCES))
def test_a_hang_past_the_loop_the_others_run_is_uneven_data(name: str, tmp_path: Path) -> None:
    source, (looping, waiting) = SOURCES[name]
    script = tmp_path / "train.py"
    script.write_text(source)
    func = "main" if "def main" in source else "<module>"
    others = _group(0, script, ((looping, func),))
    culprit = _group(1, script, ((waiting, func),))
    reason = uneven_reason([others, culprit], (1,))
    assert (reason is not None) == (name in UNEVEN), reason
    if reason is not None:
        assert reason.startswith("it left the loop the others still run")
        # the other way round: the culprit named is the one still in the loop
        assert uneven_reason([culprit, others], (0,)) is not None


def test_the_loop_can_be_in_a_function_the_culprit_has_returned_from(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "def train(batches):\n"  # 1
        "    for batch in batches:\n"  # 2
        "        dist.all_reduce(batch)\n"  # 3
        "\n"
        "train(shard)\n"  # 5
        "dist.barrier()\n"  # 6
    )
    others = _group(0, script, ((3, "train"), (5, "<module>")))
    culprit = _group(1, script, ((6, "<module>"),))
    assert uneven_reason([others, culprit], (1,)) is not None
    # counts that differ, a rank outside any collective, or no source: not this rule
    assert uneven_reason([others, _group(1, script, ((6, "<module>"),), seq=9)], (1,)) is None
    assert (
        uneven_reason([others, _group(1, script, ((6, "<module>"),), waiting=False)], (1,)) is None
    )
    gone = _group(1, tmp_path / "gone.py", ((6, "<module>"),))
    assert (
        uneven_reason(
            [_group(0, tmp_path / "gone.py", ((3, "train"), (5, "<module>"))), gone], (1,)
        )
        is None
    )


def test_an_uneven_hang_is_data_sampling() -> None:
    group = Whereabouts(
        ranks=(1,), activity="barrier", location=None, waiting=True, seqs=(3,), frozen=None
    )
    hang = HangAnalysis(
        stuck_for=9.0,
        timeout=8.0,
        groups=(group,),
        exited=(),
        culprits=(1,),
        reason="r",
        stacks_dir=None,
        uneven=True,
    )
    assert hang_class(hang) == "data/sampling"


@pytest.mark.parametrize(
    ("frames", "children", "klass"),
    [
        ((("/job/data.py", 41, "__getitem__"), ("/job/train.py", 9, "train")), None,
         "data/sampling"),
        ((("/job/train.py", 9, "train"),), "waits for its DataLoader worker (pid 7), which is in "
         "decode at /job/data.py:41", "data/sampling"),
        ((("/job/train.py", 9, "train"),), "waits for its child process (pid 7: tar)", "unknown"),
        ((("/job/model.py", 12, "forward"),), None, "unknown"),
    ],
)  # fmt: skip
def test_a_hang_culprit_stuck_loading_data_is_data_sampling(frames, children, klass) -> None:
    """Stuck outside communication inside a Dataset's method, or waiting for its DataLoader
    workers: data/sampling; stuck elsewhere in its own code: unknown (its stack is the lead)."""
    stuck = Whereabouts(
        ranks=(1,), activity="sleep", location=None, waiting=False, seqs=(3,), frozen=None,
        frames=frames, children=children,
    )  # fmt: skip
    waiting = Whereabouts(
        ranks=(0, 2), activity="all_reduce", location=None, waiting=True, seqs=(4,), frozen=None
    )
    hang = HangAnalysis(
        stuck_for=9.0, timeout=8.0, groups=(waiting, stuck), exited=(), culprits=(1,),
        reason="r", stacks_dir=None,
    )  # fmt: skip
    assert hang_class(hang) == klass


# --- real launches ---------------------------------------------------------------


def _run(tmp_path: Path, case: str, *args: str) -> tuple[str, dict[str, object], Path]:
    pytest.importorskip("torch")
    run = launch(
        tmp_path, "--nproc-per-node=2", *args, worker("leaving_cases.py"), env={"CASE": case}
    )
    report = json.loads((run.attempt() / "report.json").read_text())
    return run.stderr, {"code": run.returncode, **report}, run.run_dir


@pytest.mark.slow
def test_a_rank_that_destroyed_its_group_and_worked_on_is_the_root_cause(tmp_path: Path) -> None:
    stderr, report, run_dir = _run(tmp_path, "destroyed")
    diagnosis = report["diagnosis"]
    assert isinstance(diagnosis, dict)
    assert (diagnosis["root_cause_rank"], diagnosis["class"]) == (1, "data/sampling"), stderr
    assert diagnosis["left_early"] and diagnosis["signature"] == "rank-left-early"
    assert (
        "safelaunch: FAILED: rank 1 left the collectives after #2 (destroy_process_group) "
        "while the other ranks still communicated" in stderr
    )
    assert "error: destroy_process_group() after collective #2" in stderr
    assert "leaving_cases.py:23 in destroyed" in stderr
    assert "rank 0: failed as a consequence (peer-connection-closed), not a cause" in stderr
    # rank 1 was stopped by safelaunch: no code of its own; rank 0's, the first failure's
    assert report["code"] == report["exit_code"] == 1
    assert "exit code 1 (rank 0's, the first failure: rank 1 left without an error code)" in stderr
    ranks, klass, _, text = _explained(run_dir)
    assert (ranks, klass) == ((1,), "data/sampling")
    assert _cause_block(text) == _cause_block(stderr)


@pytest.mark.slow
def test_a_rank_that_ran_out_of_batches_and_waits_after_its_loop_is_uneven_data(
    tmp_path: Path,
) -> None:
    stderr, report, run_dir = _run(tmp_path, "short", "--hang-timeout", "6")
    assert report["code"] == report["exit_code"] == 124
    hang, diagnosis = report["hang"], report["diagnosis"]
    assert isinstance(hang, dict) and isinstance(diagnosis, dict)
    assert hang["culprits"] == [1]
    assert (diagnosis["class"], diagnosis["signature"]) == (
        "data/sampling",
        "uneven-iterations",
    ), (hang, stderr[-3000:])
    assert any("drop_last" in step for step in diagnosis["next_steps"])
    assert (
        "likely culprit: rank 1: it left the loop the others still run (fewer iterations: "
        "it ran out of data)" in stderr
    )
    assert "  class: data/sampling (uneven-iterations): " in stderr
    assert "  next:  for inputs that are uneven by nature: with model.join():" in stderr
    ranks, klass, where, text = _explained(run_dir)
    assert (ranks, klass) == ((1,), "data/sampling")
    assert where is not None and where.startswith("leaving_cases.py:37")
    # explain gives the same class line and next steps as the live summary
    assert "  class: data/sampling (uneven-iterations): " in text
    live = [line.split("safelaunch: ", 1)[-1] for line in stderr.splitlines() if "  next: " in line]
    assert live and [line for line in text.splitlines() if line.startswith("  next:  ")] == live


@pytest.mark.slow
def test_a_rank_that_exits_with_its_own_code_after_an_error_is_its_own_failure(
    tmp_path: Path,
) -> None:
    stderr, report, run_dir = _run(tmp_path, "exit")
    diagnosis = report["diagnosis"]
    assert isinstance(diagnosis, dict)
    assert (diagnosis["root_cause_rank"], diagnosis["class"]) == (1, "unknown"), stderr
    assert not diagnosis["left_early"] and diagnosis["next_steps"] == []
    assert "safelaunch: FAILED: rank 1 exited with code 4 after" in stderr
    assert "  error: error: could not open shard index /nonexistent/index.json" in stderr
    assert "  at:    " in stderr and "leaving_cases.py:44 in load_index" in stderr
    assert "drop_last" not in stderr
    assert report["code"] == report["exit_code"] == 4
    assert "exit code 4 (rank 1's own code)" in stderr
    ranks, klass, _, text = _explained(run_dir)
    assert (ranks, klass) == ((1,), "unknown")
    assert _cause_block(text) == _cause_block(stderr)


def test_the_rank_records_the_destroy_at_once_and_keeps_it_at_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(names.HEARTBEAT_DIR, str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(beat, "_left", None)
    beat.left_collectives(sys._getframe())  # what the destroy_process_group wrapper calls
    here = f"{__file__}:"
    leave = read_leaves(tmp_path)[1]
    assert leave.how == "destroy_process_group" and (leave.location or "").startswith(here)
    beat.write_exit("returned", 0, [])  # the script ends later: the place it left is kept
    leave = read_leaves(tmp_path)[1]
    assert leave.how == "returned" and (leave.location or "").startswith(here)
    beat.rejoined()  # init_process_group again: it takes part again
    assert read_leaves(tmp_path) == {}
