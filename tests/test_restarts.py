"""Real launches under the restart policy (docs/restarts.md): what restarts, what stops."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
from conftest import Run, launch, worker

from safelaunch import exitcodes
from safelaunch.restarts.rule import Why

CASES = worker("restart_cases.py")
SCHEMA = json.loads((Path(__file__).parents[1] / "docs" / "report.schema.json").read_text())


def _report(run: Run, attempt: int) -> dict[str, Any]:
    """The attempt's report.json, checked against the schema."""
    report: dict[str, Any] = json.loads((run.attempt(attempt) / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    return report


def _attempts(run: Run) -> int:
    return len(list(run.run_dir.glob("attempt_*")))


def test_a_deterministic_failure_ends_the_restarts_at_once(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", "--max-restarts=3", CASES, env={"CASE": "import"})
    assert run.returncode == exitcodes.NO_REQUEUE, run.stderr
    assert _attempts(run) == 1
    stopped = "restarts stopped (3 of 3 left): deterministic failure (ModuleNotFoundError)"
    assert stopped in run.stderr
    assert "exit code 93 (do not requeue; the root cause's own code: 1)" in run.stderr
    restarts = _report(run, 0)["restarts"]
    assert (restarts["restart"], restarts["requeue"], restarts["why"]) == (
        False,
        False,
        "deterministic failure",
    )
    assert _report(run, 0)["exit_code"] == exitcodes.NO_REQUEUE


def test_always_restarts_it_as_torchrun_does(tmp_path: Path) -> None:
    run = launch(
        tmp_path,
        "--nproc-per-node=2",
        "--max-restarts=2",
        "--restart-policy=always",
        CASES,
        env={"CASE": "import"},
    )
    assert run.returncode == 1, run.stderr  # the root cause's own code, as without a policy
    assert _attempts(run) == 3
    assert [a["exit_code"] for a in _report(run, 2)["attempts"]] == [1, 1, 1]


def test_a_transient_failure_restarts_then_asks_for_a_requeue(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", "--max-restarts=1", CASES, env={"CASE": "kill"})
    assert run.returncode == exitcodes.REQUEUE, run.stderr
    assert _attempts(run) == 2
    assert _report(run, 0)["restarts"]["restart"] is True
    last = _report(run, 1)["restarts"]
    assert (last["why"], last["persistence"], last["requeue"]) == (
        "restarts spent",
        "transient",
        True,
    )
    assert "exit code 75 (requeue may help; the root cause's own code: 137)" in run.stderr


def test_the_same_step_twice_without_progress_ends_the_restarts(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", "--max-restarts=3", CASES, env={"CASE": "step"})
    assert run.returncode == exitcodes.NO_REQUEUE, run.stderr
    assert _attempts(run) == 2  # rank 0 failed at step 2, then rank 1 at step 2
    restarts = _report(run, 1)["restarts"]
    assert restarts["why"] == Why.NO_PROGRESS
    assert "step 2 in attempts 0 and 1" in restarts["reason"]


def test_a_failure_that_moves_keeps_restarting(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", "--max-restarts=3", CASES, env={"CASE": "moving"})
    assert run.returncode == 0, run.stderr
    assert _attempts(run) == 3
    assert [a["status"] for a in _report(run, 2)["attempts"]] == ["failed", "failed", "succeeded"]
