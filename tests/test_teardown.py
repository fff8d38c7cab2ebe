"""Fault injection around teardown: nothing the job started may survive it."""

from __future__ import annotations

import glob
import os
import signal
import tempfile
import time
from pathlib import Path

import pytest
from conftest import assert_no_orphans, launch, start, worker

from safelaunch.supervisor.procs import is_alive
from safelaunch.supervisor.signals import REPEAT_WINDOW

pytestmark = pytest.mark.slow


def _recorded_pids(tmp_path: Path) -> list[int]:
    return [int(p) for f in (tmp_path / "pids").iterdir() for p in f.read_text().split()]


def test_failed_rank_children_and_sigterm_ignoring_grandchildren_are_ended(
    tmp_path: Path,
) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", worker("children.py"), env={"MODE": "fail"})
    assert run.returncode == 1
    assert "FAILED: rank 1 exited with code 1" in run.stderr
    assert len(_recorded_pids(tmp_path)) == 6  # 2 ranks x (rank, stubborn child, setsid child)
    assert "leftover process(es)" in run.stderr
    # The bound is the feature: stubborn children get SIGKILL after a short grace instead of
    # sleeping out their 60 s (30 s: margin for a loaded machine).
    assert run.wall < 30


def test_background_children_after_success_are_ended(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", worker("children.py"), env={"MODE": "ok"})
    assert run.returncode == 0, run.stderr
    assert "all 2 ranks succeeded" in run.stderr
    assert "ended 4 leftover process(es)" in run.stderr


def test_shutdown_timeout_bounds_a_rank_that_ignores_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    time.sleep(0.5); sys.exit(4)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "time.sleep(60)\n"
    )
    run = launch(tmp_path, "--nproc-per-node=2", "--shutdown-timeout=1", str(script))
    assert run.returncode == 4
    assert "rank 0: stopped by safelaunch (SIGKILL)" in run.stderr
    # The bound is the feature: 1 s of grace, then SIGKILL, not rank 0's 60 s sleep nor the
    # 30 s default (20 s: margin for a loaded machine).
    assert run.wall < 20


def _start_and_wait_ready(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    proc, mark = start(tmp_path, *args, env=env)
    nproc = int(next(a for a in args if a.startswith("--nproc-per-node=")).split("=")[1])
    deadline = time.monotonic() + 30
    while len(list((tmp_path / "pids").iterdir())) < nproc:
        assert time.monotonic() < deadline, "ranks never became ready"
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.3)  # children have installed their handlers
    return proc, mark


@pytest.mark.parametrize(
    ("sig", "code"),
    [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129), (signal.SIGQUIT, 131)],
)
def test_launcher_signal_is_forwarded_and_nothing_survives(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    proc, mark = _start_and_wait_ready(
        tmp_path,
        "--nproc-per-node=2",
        "--shutdown-timeout=5",
        worker("children.py"),
        env={"MODE": "hold"},
    )
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    # The bound is the feature: --shutdown-timeout=5 bounds the teardown, the ranks would
    # hold for 120 s (20 s: margin for a loaded machine).
    assert time.monotonic() - sent < 20
    text = err.decode()
    assert f"received {sig.name}: forwarding it to every rank" in text
    assert f"interrupted by {sig.name}" in text
    assert_no_orphans(mark, within=2.0)


def test_second_signal_kills_at_once(tmp_path: Path) -> None:
    proc, mark = _start_and_wait_ready(
        tmp_path, "--nproc-per-node=2", worker("sleeper.py"), env={"IGNORE_TERM": "1"}
    )
    proc.send_signal(signal.SIGTERM)
    time.sleep(REPEAT_WINDOW + 0.3)  # sooner, it is the same request (test_signals.py)
    assert proc.poll() is None  # the ranks ignore SIGTERM: the 30 s grace is running
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 143
    assert "again: killing now" in err.decode()
    assert_no_orphans(mark, within=2.0)


def test_launcher_sigkill_takes_every_rank_and_grandchild_with_it(tmp_path: Path) -> None:
    proc, mark = _start_and_wait_ready(
        tmp_path, "--nproc-per-node=2", worker("children.py"), env={"MODE": "hold"}
    )
    proc.kill()
    proc.wait(timeout=5)
    assert_no_orphans(mark, within=2.0)


def test_ranks_die_with_the_launcher_even_without_its_watcher(tmp_path: Path) -> None:
    """`pkill -9 -f safelaunch` kills the watcher too: the parent-death signal remains."""
    proc, mark = _start_and_wait_ready(tmp_path, "--nproc-per-node=2", worker("sleeper.py"))
    ranks = {int(f.read_text()) for f in (tmp_path / "pids").iterdir()}
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    watchers = [int(pid) for pid in children if int(pid) not in ranks]
    assert len(watchers) == 1
    os.kill(watchers[0], signal.SIGKILL)
    proc.kill()
    proc.wait(timeout=5)
    assert_no_orphans(mark, within=2.0)


def test_descendants_that_clear_their_environment_die_with_a_killed_launcher(
    tmp_path: Path,
) -> None:
    escapees = tmp_path / "escapees"
    escapees.mkdir()
    proc, mark = _start_and_wait_ready(
        tmp_path, "--nproc-per-node=2", worker("env_cleared.py"), env={"ESCAPEES": str(escapees)}
    )
    deadline = time.monotonic() + 30
    while (
        len((escapees / "pids").read_text().split()) < 8 if (escapees / "pids").exists() else True
    ):
        assert time.monotonic() < deadline, "the descendants never started"
        time.sleep(0.05)
    time.sleep(1.5)  # three of the keeper's records (every 0.5 s) have seen them
    pids = [int(p) for p in (escapees / "pids").read_text().split()]
    run_id = (tmp_path / "logs" / "latest").resolve().name
    private = f"{tempfile.gettempdir()}/safelaunch-{run_id}-*"
    assert glob.glob(private)  # heartbeats live there while the job runs
    proc.kill()
    proc.wait(timeout=5)
    deadline = time.monotonic() + 10
    while [p for p in pids if is_alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = [p for p in pids if is_alive(p)]
    for pid in survivors:  # leave nothing behind, even when failing
        os.kill(pid, signal.SIGKILL)
    assert survivors == [], f"{len(survivors)} of {len(pids)} survived"
    assert_no_orphans(mark, within=2.0)
    assert glob.glob(private) == []  # the keeper removed the launcher's private directory
