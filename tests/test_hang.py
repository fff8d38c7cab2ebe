"""Hangs on real Gloo ranks: detected within --hang-timeout + 2 s, culprit named with file:line."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import LONG, Run, console_lines, launch, line_of, once_per_run, worker

from safelaunch import exitcodes

pytestmark = pytest.mark.slow
TIMEOUT = 3.0


def _detection_latency(tmp_path: Path, run) -> float:
    """From the moment the job went quiet to the hang's detection: the culprit's hang
    start, or the last progress of the others, later on a loaded machine (they were still
    arriving at the collective it never reaches; CI once measured 5.5 s from the start)."""
    started = float((tmp_path / "pids" / "hang_start").read_text())
    evidence = json.loads((run.attempt() / "stacks" / "hang.json").read_text())
    quiet = max([started, *(r["last_progress"] or 0.0 for r in evidence["ranks"])])
    return evidence["detected_at"] - quiet


def _hang(tmp_path: Path, case: str, nproc: int = 3):
    return launch(
        tmp_path,
        f"--nproc-per-node={nproc}",
        f"--hang-timeout={TIMEOUT}",
        "--shutdown-timeout=5",
        worker("hang_cases.py"),
        env={"CASE": case},
        timeout=120,
    )


def _assert_hang(tmp_path: Path, run, dumped: tuple[int, ...] = (0, 1, 2)) -> str:
    assert run.returncode == exitcodes.HANG, run.stderr
    latency = _detection_latency(tmp_path, run)
    assert TIMEOUT <= latency <= TIMEOUT + 2.0, latency
    stacks = run.attempt() / "stacks"
    for rank in dumped:  # every live rank's threads, from faulthandler
        dump = (stacks / f"rank{rank}.txt").read_text()
        assert "most recent call first" in dump, (rank, dump, run.stderr)
    return run.stderr


@pytest.fixture(scope="module")
def loaded_sleep_hang(tmp_path_factory: pytest.TempPathFactory):
    """Rank 1 asleep in data loading, two CPU hogs beside the job: one real hang for the
    test of the names and for the test of the loaded machine."""

    def make() -> tuple[Path, Run]:
        where = tmp_path_factory.mktemp("sleep_hang")
        with _hogs(once=where / "pids" / "hang_start"):
            return where, _hang(where, "sleep")

    return once_per_run("loaded_sleep_hang", tmp_path_factory, make)


def test_rank_sleeping_in_data_loading_is_named(loaded_sleep_hang) -> None:
    tmp_path, run = loaded_sleep_hang
    text = _assert_hang(tmp_path, run)
    script = worker("hang_cases.py")
    sleep_line = line_of(script, "time.sleep(3600)")
    reduce_line = line_of(script, "dist.all_reduce(batch)")
    assert f"ranks 0,2 wait in all_reduce ({script}:{reduce_line} in main, collective #4)" in text
    assert f"rank 1 is in load_next_batch ({script}:{sleep_line} in load_next_batch" in text
    assert "likely culprit: rank 1: it is behind: collective #3 vs #4" in text
    assert (tmp_path / "logs").exists()


def test_rank_skipping_a_collective_is_named(tmp_path: Path) -> None:
    text = _assert_hang(tmp_path, _hang(tmp_path, "skip"))
    script = worker("hang_cases.py")
    barrier_line = line_of(script, "dist.barrier()")
    assert f"rank 1 waits in barrier ({script}:{barrier_line} in main" in text
    assert "ranks 0,2 wait in all_reduce" in text
    assert "likely culprit: rank 1" in text


def test_stopped_rank_is_named(tmp_path: Path) -> None:
    text = _assert_hang(tmp_path, _hang(tmp_path, "stop"), dumped=(0, 2))  # 1 is left stopped
    assert "stopped (process state T" in text and "<- the odd one out" in text
    assert "likely culprit: rank 1: it stopped responding" in text


def test_rank_holding_the_gil_in_native_code_is_named(tmp_path: Path) -> None:
    text = _assert_hang(tmp_path, _hang(tmp_path, "gil"))
    script = worker("hang_cases.py")
    gil_line = line_of(script, "ctypes.PyDLL(None).sleep(3600)")
    assert f"rank 1 is in main ({script}:{gil_line} in main" in text, text
    assert "native code holding the GIL" in text, text
    assert "likely culprit: rank 1" in text, text  # CI once lacked it under load (session 12)


def test_py_spy_adds_native_stacks_when_installed(tmp_path: Path) -> None:
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        pytest.skip("py-spy is not installed")
    path = f"{spy.parent}{os.pathsep}{os.environ['PATH']}"
    run = launch(
        tmp_path,
        "--nproc-per-node=2",
        f"--hang-timeout={TIMEOUT}",
        worker("hang_cases.py"),
        env={"CASE": "sleep", "PATH": path},
        timeout=120,
    )
    assert run.returncode == exitcodes.HANG
    native = (run.attempt() / "stacks" / "rank1.py-spy.txt").read_text()
    assert "load_next_batch (hang_cases.py:" in native and "libc" in native


@LONG  # the same job beside two CPU hogs: test_silent_compute_on_a_loaded_machine_is_not_a_hang
def test_silent_compute_is_not_a_hang(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", "--hang-timeout=1.5", worker("silent_compute.py"))
    assert run.returncode == 0, run.stderr
    assert "HUNG" not in run.stderr and "hang:" not in run.stderr


def test_long_but_progressing_startup_is_not_a_hang(tmp_path: Path) -> None:
    run = launch(
        tmp_path,
        "--nproc-per-node=2",
        "--hang-timeout=2",
        worker("slow_start.py"),
        env={"START_SECONDS": "4"},  # twice the deadline
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "joined" in console_lines(run.stdout, 1)


def test_explicit_steps_keep_a_sleepy_loop_alive(tmp_path: Path) -> None:
    flags = ["--nproc-per-node=1", "--hang-timeout=1.5", worker("stepped_sleep.py")]
    run = launch(tmp_path, *flags, env={"STEPS": "1"})
    assert run.returncode == 0, run.stderr
    # the same loop without steps: every sample lands on the same sleep call
    run = launch(tmp_path, *flags, env={"STEPS": "0"})
    assert run.returncode == exitcodes.HANG


def test_non_python_ranks_fall_back_to_output_silence(tmp_path: Path) -> None:
    tool = tmp_path / "quiet.sh"
    tool.write_text("#!/bin/sh\necho started\nsleep 100\n")
    tool.chmod(0o755)
    run = launch(
        tmp_path,
        "--no-python",
        "--nproc-per-node=2",
        "--hang-timeout=1.5",
        "--max-restarts=1",
        str(tool),
    )
    assert run.returncode == exitcodes.HANG
    assert "HUNG (attempt 1)" in run.stderr  # a hang counts against --max-restarts
    assert "ranks 0,1 are in an unknown place (no Python stack; judged by output)" in run.stderr
    assert "heartbeat" not in run.stderr.split("HUNG")[-1]  # no python claims for native ranks


def test_hang_detection_can_be_turned_off(tmp_path: Path) -> None:
    run = launch(tmp_path, "--hang-timeout=0", worker("stepped_sleep.py"), env={"ROUNDS": "8"})
    assert run.returncode == 0
    assert not list(Path(run.run_dir / "attempt_0").glob("stacks"))


def _plain_and_launched(
    tmp_path: Path, env_extra: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], object]:
    env = {**os.environ, **env_extra, "PIDS_DIR": str(tmp_path)}
    plain = subprocess.run(
        [sys.executable, "-u", worker("transparency.py"), "a", "--b"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    run = launch(tmp_path, worker("transparency.py"), "a", "--b", env=env_extra)
    return plain, run


def test_bootstrap_is_transparent(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['SITECUSTOMIZE_RAN'] = 'yes'\n")
    extra = {"PYTHONPATH": str(site)}
    plain, run = _plain_and_launched(tmp_path, extra)
    assert run.returncode == plain.returncode == 0
    ours = json.loads(console_lines(run.stdout, 0)[0])
    assert ours == json.loads(plain.stdout.splitlines()[0])
    assert ours["sitecustomize"] == "yes" and ours["pickled"] == 3


@pytest.mark.parametrize(
    ("action", "code"), [("raise", 1), ("exit3", 3), ("exitmsg", 1), ("interrupt", 130)]
)
def test_exit_codes_and_uncaught_exceptions_are_unchanged(
    tmp_path: Path, action: str, code: int
) -> None:
    plain, run = _plain_and_launched(tmp_path, {"ACTION": action})
    plain_code = 128 - plain.returncode if plain.returncode < 0 else plain.returncode
    assert plain_code == code
    assert run.returncode == code
    # after its JSON line, the rank wrote exactly what plain python wrote to stderr
    assert run.rank_log(0).decode().splitlines()[1:] == plain.stderr.splitlines()


# Spins for at most 120 s; with a path, only once it exists (the window the test is about:
# the ranks' torch imports before it would only be slower, and the hogs' CPU the suite's).
HOG = """
import os, sys, time
end = time.time() + 120
while len(sys.argv) > 1 and not os.path.exists(sys.argv[1]) and time.time() < end:
    time.sleep(0.05)
while time.time() < end:
    pass
"""


@contextlib.contextmanager
def _hogs(once: Path | None = None) -> Iterator[None]:
    """Two processes spinning beside the test, from the start or once `once` exists."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", HOG, *([str(once)] if once else [])])
        for _ in range(2)
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.fixture
def cpu_hog() -> Iterator[None]:
    with _hogs():
        yield


def test_rank_waiting_on_working_children_is_not_a_hang(tmp_path: Path) -> None:
    """subprocess.run computing, then uploading, while the other rank waits; the machine loaded."""
    with _hogs(once=tmp_path / "pids" / "children_start"):
        run = launch(
            tmp_path,
            "--nproc-per-node=2",
            "--hang-timeout=1.5",
            worker("child_work.py"),
            env={"CHILD_SECONDS": "2"},
            timeout=120,
        )
    assert run.returncode == 0, run.stderr
    assert "HUNG" not in run.stderr and "hang:" not in run.stderr


def test_hang_caught_on_a_loaded_machine(loaded_sleep_hang) -> None:
    text = _assert_hang(*loaded_sleep_hang)  # the names: test_rank_sleeping_in_data_loading
    assert "likely culprit: rank 1" in text


def test_silent_compute_on_a_loaded_machine_is_not_a_hang(tmp_path: Path, cpu_hog) -> None:
    """The heartbeat thread starved: the CPU the rank got still counts (the launcher reads it)."""
    run = launch(
        tmp_path,
        "--nproc-per-node=2",
        "--hang-timeout=1.5",
        worker("silent_compute.py"),
        env={"SECONDS_BUSY": "3"},  # twice the deadline
    )
    assert run.returncode == 0, run.stderr
    assert "HUNG" not in run.stderr and "hang:" not in run.stderr
