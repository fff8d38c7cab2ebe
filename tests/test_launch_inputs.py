"""Launch inputs the flag and environment tests do not reach, each a real launch.

Each case is a real launch through conftest's helpers: a script that is a pipe, a `--`
right after the script (compared with torchrun's own argparse layout), far more ranks
than CPUs, and SIGTERM during preflight.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import (
    assert_no_orphans,
    cli,
    launch,
    marked_env,
    safelaunch_cmd,
    start,
    wait_for,
    worker,
)

from safelaunch import exitcodes
from safelaunch.preflight.system import RANKS_PER_CPU_MAX, WARNING, crowding_finding


def _refused(result: subprocess.CompletedProcess[str], tmp_path: Path, needle: str) -> None:
    """Exit 78, one line naming the problem, no traceback, nothing started."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == exitcodes.PREFLIGHT, result.stderr
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "logs").exists() and not list((tmp_path / "pids").iterdir())


def test_a_fifo_as_the_script_is_refused_and_never_blocks(tmp_path: Path) -> None:
    # Nobody writes the FIFO: an open() for reading would block for ever (it did, in
    # the compile check); `<(...)` hands the launcher such a pipe.
    fifo = tmp_path / "train.py"
    os.mkfifo(fifo)
    result = cli(tmp_path, "--nproc-per-node=2", str(fifo), timeout=20)
    _refused(result, tmp_path, "is a pipe (FIFO)")


def test_a_device_as_the_script_is_refused(tmp_path: Path) -> None:
    result = cli(tmp_path, "--nproc-per-node=1", os.devnull, timeout=20)
    _refused(result, tmp_path, "is not a regular file")


def test_lint_of_a_fifo_is_a_usage_error_not_a_wait(tmp_path: Path) -> None:
    fifo = tmp_path / "train.py"
    os.mkfifo(fifo)
    env, _ = marked_env(tmp_path)
    result = subprocess.run(
        safelaunch_cmd("lint", str(fifo)), env=env, capture_output=True, text=True, timeout=20
    )
    assert result.returncode == exitcodes.USAGE, result.stderr
    assert "is a pipe or device, not a script file" in result.stderr
    assert "Traceback" not in result.stderr


def _torchrun_layout(argv: list[str]) -> list[str]:
    """What torchrun's parser (torch/distributed/run.py: a training_script positional, then
    nargs=REMAINDER) hands the script; the same on every Python from 3.6 to 3.13."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc-per-node")
    parser.add_argument("training_script")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return list(parser.parse_args(argv).training_script_args)


@pytest.mark.parametrize(
    "after",
    [
        ["--", "--lr", "1"],  # torchrun drops this `--`: the script sees --lr 1
        ["a", "--", "b"],  # a later `--` is the script's
        ["--", "--", "x"],
    ],
)
def test_a_double_dash_after_the_script_reaches_it_as_torchrun_passes_it(
    tmp_path: Path, after: list[str]
) -> None:
    script = worker("dump_env.py")
    run = launch(tmp_path, "--nproc-per-node=1", script, *after)
    assert run.returncode == 0, run.stderr
    dumped = json.loads((tmp_path / "pids" / "env0.json").read_text())
    assert dumped["argv"][1:] == _torchrun_layout(["--nproc-per-node=1", script, *after])


def test_far_more_ranks_than_cpus_is_said_and_strict_stops_it(tmp_path: Path) -> None:
    cpus = len(os.sched_getaffinity(0))
    many = RANKS_PER_CPU_MAX * cpus + 1
    # --strict makes the warning fatal: said, and not one of the ranks started
    result = cli(tmp_path, "--strict", f"--nproc-per-node={many}", worker("dump_env.py"))
    _refused(result, tmp_path, f"{many} ranks on {cpus} CPU(s)")


@pytest.mark.parametrize(
    ("nproc", "cpus", "warned"), [(8, 2, False), (9, 2, True), (1000, 2, True), (2, 0, False)]
)
def test_crowding_is_a_warning_beyond_four_ranks_per_cpu(
    nproc: int, cpus: int, warned: bool
) -> None:
    assert (crowding_finding(nproc, cpus).level == WARNING) is warned


def _catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler of its own for `signum` (/proc's SigCgt mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (signum - 1) & 1)


def test_sigterm_during_preflight_is_one_line_and_143(tmp_path: Path) -> None:
    # A long script: the compile check takes a second or more, and SIGTERM comes once
    # the CLI handles it (before, the kernel's default ended the launcher without a word)
    script = tmp_path / "long.py"
    script.write_text("x = 1\n" * 400_000)
    proc, mark = start(tmp_path, "--nproc-per-node=1", str(script), text=True)
    wait_for(lambda: _catches(proc.pid, signal.SIGTERM), 30, "the CLI's SIGTERM handler", 0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == exitcodes.for_signal(signal.SIGTERM), err
    assert err.strip() == "safelaunch: stopped by SIGTERM before any rank started"
    assert not (tmp_path / "logs").exists()
    assert_no_orphans(mark, within=2.0)
