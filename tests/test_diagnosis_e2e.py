"""End to end: real failing jobs get their class, signature, next steps and report.json."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import builders
import pytest
from conftest import LONG, launch, line_of, worker
from test_teardown import _start_and_wait_ready

pytestmark = pytest.mark.slow


def _report(run) -> dict:
    return builders.read_report(run.attempt())


# the same job and checks in CI: test_isolation's test_auto_skips_deterministic_program_faults...
@LONG
def test_sampler_and_shuffle_is_data_sampling(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", worker("bad_sampler.py"), timeout=120)
    assert run.returncode == 1
    assert "class: data/sampling (sampler-and-shuffle)" in run.stderr
    assert "next:  drop shuffle=True" in run.stderr
    report = _report(run)
    assert report["diagnosis"]["root_cause_rank"] == 1
    line = line_of(worker("bad_sampler.py"), "shuffle=True)")
    assert report["diagnosis"]["location"] == f"{worker('bad_sampler.py')}:{line} in <module>"


# the class and isolation_helps in CI: test_isolation's test_nccl_missing_then_gloo_trains_...
@LONG
def test_nccl_on_a_cpu_build_is_environment(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", worker("nccl_on_cpu.py"), timeout=120)
    assert run.returncode == 1
    assert "class: environment/launch (nccl-not-built)" in run.stderr
    assert _report(run)["diagnosis"]["isolation_helps"] is True


@pytest.mark.parametrize(
    ("sig", "expected"),
    [("KILL", "resources (killed-sigkill)"), ("SEGV", "unknown (native-crash)")],
)
def test_deaths_by_signal(tmp_path: Path, sig: str, expected: str) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", worker("kill_self.py"), env={"SIG": sig})
    assert f"class: {expected}" in run.stderr
    if sig == "KILL":
        assert "dmesg -T" in run.stderr
    else:  # faulthandler wrote the Python stack into the rank's log
        assert b"Fatal Python error: Segmentation fault" in run.rank_log(1)


def test_nan_loss_is_noted_even_on_success(tmp_path: Path) -> None:
    run = launch(tmp_path, worker("nan_loss.py"))
    assert run.returncode == 0
    assert "note: rank 0 logged a non-finite loss: 'step 2 loss nan'" in run.stderr
    assert _report(run)["status"] == "succeeded"


def test_report_is_written_when_interrupted(tmp_path: Path) -> None:
    proc, _ = _start_and_wait_ready(tmp_path, "--nproc-per-node=2", worker("sleeper.py"))
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    report = json.loads(next((tmp_path / "logs").glob("*/attempt_0/report.json")).read_text())
    assert report["status"] == "interrupted" and report["exit_code"] == 130
    assert {r["state"] for r in report["ranks"]} == {"stopped"}


def test_ddp_unused_parameters_is_model_gradient(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", worker("ddp_unused.py"), timeout=120)
    assert run.returncode != 0
    assert "class: model/gradient (ddp-unused-parameters)" in run.stderr
    assert "find_unused_parameters=True" in run.stderr


def test_peer_crash_seen_from_survivors_names_the_peer(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=3", worker("peer_crash.py"), timeout=120)
    assert run.returncode == 3
    report = _report(run)
    assert report["diagnosis"]["root_cause_rank"] == 1
    # survivors either were stopped by safelaunch or failed with a consequence, never the cause
    for rank in (0, 2):
        line = next(r for r in report["ranks"] if r["rank"] == rank)
        failed_on_their_own = line["state"] == "failed"
        if failed_on_their_own:
            assert {"rank": rank, "signature": "peer-connection-closed"} in report["diagnosis"][
                "consequences"
            ]


def test_a_plain_error_is_unknown_with_its_error_as_the_lead(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", worker("fail_one.py"))
    assert "class: unknown: no rule decides; seen: RuntimeError raised in your code" in run.stderr
    assert "fail_one.py:8 first" in run.stderr
