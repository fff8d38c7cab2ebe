"""Evidence taken before teardown on real Gloo ranks: where the survivors of a failure
were (stacks/failure.json, the summary, report.json's `survivors`)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from conftest import launch, line_of, worker

from safelaunch import exitcodes
from safelaunch.diagnose.leaving import Leave, LeaveHow, read_leaves, read_lingering, still_running
from safelaunch.hangs.analysis import where_they_were
from safelaunch.hangs.detection import HangEvidence, RankProgress
from safelaunch.rundir import exit_file, stack_files

pytestmark = pytest.mark.slow

WORLD = 4
_DRAW = random.Random(24)  # fixed seed: the same ranks on every run
FAILING = [tuple(_DRAW.sample(range(WORLD), 2)) for _ in range(2)]  # (failing, slow) ranks


@pytest.mark.parametrize(("failing", "slow"), FAILING)
def test_failure_shows_where_the_survivors_were(tmp_path: Path, failing: int, slow: int) -> None:
    script = worker("survivor_cases.py")
    run = launch(
        tmp_path,
        f"--nproc-per-node={WORLD}",
        "--hang-timeout=60",
        script,
        env={"FAIL": str(failing), "SLOW": str(slow)},
        timeout=120,
    )
    assert run.returncode == 1, run.stderr
    waiting = sorted(set(range(WORLD)) - {failing, slow})
    reduce_line = line_of(script, "dist.all_reduce(batch, group=others)")
    sleep_line = line_of(script, "time.sleep(3600)")
    text = run.stderr
    assert f"where the other ranks were when rank {failing} failed:" in text, text
    label = "ranks " + ",".join(map(str, waiting))
    assert f"{label} wait in all_reduce ({script}:{reduce_line} in main" in text, text
    assert f"rank {slow} is in load_next_batch ({script}:{sleep_line} in load_next_batch" in text
    report = json.loads((run.attempt() / "report.json").read_text())
    survivors = report["survivors"]
    assert survivors["failed_rank"] == failing and survivors["unanswered"] == {}
    groups = {tuple(g["ranks"]): g for g in survivors["groups"]}
    assert groups[tuple(waiting)]["waiting_in_collective"] is True
    assert groups[(slow,)]["location"] == f"{script}:{sleep_line} in load_next_batch"
    # the same shape as a hang's groups
    assert set(groups[(slow,)]) == {
        "ranks",
        "activity",
        "location",
        "waiting_in_collective",
        "collectives",
        "frozen",
        "script_ended",
        "children",
    }
    saved = stack_files.read_failure_evidence(run.attempt())
    assert saved is not None and saved["answered"] == sorted({*waiting, slow})
    # ranks that answer are done within the bound (faulthandler answers in ~1 ms)
    assert survivors["took_s"] < 2.0, survivors["took_s"]
    print(f"survivors' snapshot took {survivors['took_s'] * 1000:.0f} ms")


def test_a_job_without_collectives_is_not_asked(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", worker("fail_one.py"), timeout=60)
    assert run.returncode != 0
    report = json.loads((run.attempt() / "report.json").read_text())
    assert report["survivors"] is None
    assert stack_files.read_failure_evidence(run.attempt()) is None
    assert "where the other ranks were" not in run.stderr


def test_a_rank_that_did_not_answer_is_noted_with_its_state(tmp_path: Path) -> None:
    evidence = HangEvidence(
        detected_at=100.0,
        timeout=0.0,
        interval=1.0,
        ranks=(RankProgress(rank=3, last_progress=99.0, beat=None),),
        states={3: "R"},
        stack_files={},
        unanswered={3: "did not answer the request for its stacks"},
    )
    (group,) = where_they_were(evidence)
    assert group.ranks == (3,)
    assert group.frozen is not None
    assert group.frozen.startswith("did not answer the request for its stacks (process state R)")


@pytest.mark.parametrize("when", ["returned", "raised"])
def test_a_lingering_non_daemon_thread_is_named_with_its_line(tmp_path: Path, when: str) -> None:
    script = worker("lingering.py")
    run = launch(
        tmp_path,
        "--nproc-per-node=3",
        "--hang-timeout=3",
        "--isolate=never",
        script,
        env={"LINGER": "1", "WHEN": "raise" if when == "raised" else ""},
        timeout=120,
    )
    assert run.returncode == exitcodes.HANG, run.stderr
    where = f"{script}:{line_of(script, 'item = work.get()')} in save"
    why = (
        f"its script {when} but its process did not exit: non-daemon thread 'saver' "
        f"at {where} still runs"
    )
    assert f"likely culprit: rank 1: {why}" in run.stderr, run.stderr
    report = json.loads((run.attempt() / "report.json").read_text())
    assert report["hang"]["culprits"] == [1]
    (group,) = report["hang"]["groups"]
    assert group["ranks"] == [1] and group["script_ended"] == why


def test_still_running_names_each_thread() -> None:
    leave = Leave(
        rank=2,
        how=LeaveHow.RETURNED,
        code=0,
        location=None,
        seq=None,
        threads=(("saver", "/u/train.py:30 in save"), ("uploader", None)),
    )
    assert still_running(leave) == (
        "its script returned but its process did not exit: non-daemon threads 'saver' at "
        "/u/train.py:30 in save, 'uploader' still run"
    )
    assert (
        still_running(Leave(rank=2, how=LeaveHow.RETURNED, code=0, location=None, seq=None)) is None
    )


def test_a_rank_waiting_for_its_dataloader_worker_names_the_workers_line(tmp_path: Path) -> None:
    script = worker("loader_hang.py")
    run = launch(
        tmp_path,
        "--nproc-per-node=3",
        "--hang-timeout=3",
        "--isolate=never",
        script,
        env={"STUCK": "1"},
        timeout=120,
    )
    assert run.returncode == exitcodes.HANG, run.stderr
    sleep_line = line_of(script, "time.sleep(3600)")
    waits = re.search(
        r"rank 1 waits for its DataLoader worker \(pid (\d+)\), which is in (.*)", run.stderr
    )
    assert waits is not None, run.stderr
    assert waits[2].startswith(f"__getitem__ at {script}:{sleep_line} ("), waits[2]
    pid = int(waits[1])
    assert (run.attempt() / "stacks" / f"rank1.child{pid}.txt").read_text().count("__getitem__")
    assert "likely culprit: rank 1" in run.stderr
    report = json.loads((run.attempt() / "report.json").read_text())
    (group,) = [g for g in report["hang"]["groups"] if g["ranks"] == [1]]
    assert group["children"].startswith(f"waits for its DataLoader worker (pid {pid})")


def test_an_exit_record_keeps_its_lingering_threads(tmp_path: Path) -> None:
    threads = [("saver", [("/usr/lib/python3/queue.py", 171, "get"), ("/u/t.py", 30, "save")])]
    exit_file.write(
        str(tmp_path / exit_file.name(2)),
        how="raised",
        code=1,
        frames=[],
        now=1.0,
        seq=None,
        threads=threads,
    )
    (record,) = exit_file.read_all(tmp_path).values()
    assert record.threads == (("saver", tuple(threads[0][1])),)
    assert read_leaves(tmp_path) == {}  # it raised: its error tells, not a leave
    assert read_lingering(tmp_path) == {
        2: "its script raised but its process did not exit: non-daemon thread 'saver' at "
        "/u/t.py:30 in save still runs"
    }
