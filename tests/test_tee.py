"""Logs: every byte in each rank's file, whole unmixed lines on the console."""

from __future__ import annotations

import fcntl
import json
import os
import resource
import subprocess
import time
from pathlib import Path

import pytest
from conftest import assert_no_orphans, console_lines, launch, marked_env, safelaunch_cmd, worker

F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

PAD = "x" * 40


def _expected(rank: int, count: int) -> list[str]:
    return [f"r{rank} {i:07d} {PAD}" for i in range(count)]


@pytest.mark.slow
def test_four_ranks_100k_lines_none_lost_split_or_mixed(tmp_path: Path) -> None:
    count = 100_000
    run = launch(
        tmp_path, "--nproc-per-node=4", worker("print_lines.py"), env={"LINES": str(count)}
    )
    assert run.returncode == 0, run.stderr[-2000:]
    rank_lines = [line for line in run.stdout.splitlines() if line.startswith("[rank")]
    assert len(rank_lines) == 4 * count  # nothing but whole, prefixed lines
    for rank in range(4):
        expected = _expected(rank, count)
        assert console_lines(run.stdout, rank) == expected  # in order, none mixed
        # stdout and stderr share one pipe: the file has them in the order written
        assert run.rank_log(rank).decode().splitlines() == expected


def test_progress_bar_without_newline_neither_stalls_nor_splits_others(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", worker("progress.py"))
    assert run.returncode == 0, run.stderr
    assert console_lines(run.stdout, 1) == [f"line {i:02d} from rank 1" for i in range(30)]
    bar = console_lines(run.stdout, 0)
    assert "progress 29/30" in bar  # shown although no \n came for 1.5 s
    assert all(line.startswith("progress ") for line in bar)
    expected = "".join(f"\rprogress {i:02d}/30" for i in range(30)) + "\n"
    assert run.rank_log(0) == expected.encode()  # the file keeps the exact bytes


def test_invalid_utf8_is_replaced_on_console_and_raw_in_file(tmp_path: Path) -> None:
    run = launch(tmp_path, worker("bad_utf8.py"))
    assert run.returncode == 0
    assert console_lines(run.stdout, 0) == ["bad \ufffd\ufffd bytes", "ok \u00e9"]
    assert run.rank_log(0) == b"bad \xff\xfe bytes\nok \xc3\xa9\n"


@pytest.mark.parametrize(
    ("flags", "shown"),
    [
        ([], {0: "all", 1: "all"}),
        (["--redirects=3"], {0: "none", 1: "none"}),
        (["-r", "1"], {0: "err", 1: "err"}),
        (["--redirects=3", "--tee=2"], {0: "err", 1: "err"}),
        (["--redirects=0:3"], {0: "none", 1: "all"}),
        (["--local-ranks-filter=1"], {0: "none", 1: "all"}),
        (["--local_ranks_filter=0", "-r", "0:2"], {0: "out", 1: "none"}),
    ],
)
def test_console_steering_leaves_files_complete(
    tmp_path: Path, flags: list[str], shown: dict[int, str]
) -> None:
    count = 10
    run = launch(
        tmp_path, "--nproc-per-node=2", *flags, worker("print_lines.py"), env={"LINES": str(count)}
    )
    assert run.returncode == 0, run.stderr
    for rank in range(2):
        expected = _expected(rank, count)
        pick = {"all": expected, "none": [], "out": expected[0::2], "err": expected[1::2]}
        assert console_lines(run.stdout, rank) == pick[shown[rank]]
        assert sorted(run.rank_log(rank).decode().splitlines()) == expected


def test_duplicate_filters_copy_matching_lines(tmp_path: Path) -> None:
    run = launch(
        tmp_path,
        "--nproc-per-node=2",
        "--duplicate-stdout-filters=0000002,0000004,,x",
        "--duplicate-stderr-filters=0000003",
        worker("print_lines.py"),
        env={"LINES": "10"},
    )
    assert run.returncode == 0
    stdout_copy = (run.attempt() / "filtered_stdout.log").read_text().splitlines()
    stderr_copy = (run.attempt() / "filtered_stderr.log").read_text().splitlines()
    # ",," is a literal comma: the second filter is "0000004,x", which never matches
    assert sorted(stdout_copy) == [f"[rank{r}]: r{r} 0000002 {PAD}" for r in (0, 1)]
    assert sorted(stderr_copy) == [f"[rank{r}]: r{r} 0000003 {PAD}" for r in (0, 1)]


def test_full_disk_keeps_job_and_console_going_and_says_which_log(tmp_path: Path) -> None:
    limit = 100_000

    def small_files() -> None:  # a full disk for the launcher's files only (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env, _ = marked_env(tmp_path, {"LINES": "5000"})
    proc = subprocess.run(
        safelaunch_cmd(
            "--log-dir", str(tmp_path / "logs"), "--nproc-per-node=2", worker("print_lines.py")
        ),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=60,
        preexec_fn=small_files,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    out = proc.stdout.decode()
    for rank in range(2):
        assert console_lines(out, rank) == _expected(rank, 5000)
        assert f"rank {rank}'s log" in err and f"is incomplete after byte {limit}" in err
        log = next((tmp_path / "logs").glob(f"*/attempt_0/rank{rank}.log"))
        assert log.stat().st_size == limit


def test_unwritable_log_dir_runs_with_console_only(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    run = launch(
        tmp_path,
        "--nproc-per-node=2",
        worker("print_lines.py"),
        env={"LINES": "4"},
        log_dir=blocker / "logs",
    )
    assert run.returncode == 0, run.stderr
    assert "cannot write logs under" in run.stderr
    assert console_lines(run.stdout, 1) == _expected(1, 4)


def test_blocked_console_loses_no_byte_from_files_or_diagnosis(tmp_path: Path) -> None:
    """safelaunch's stdout is a tiny pipe nobody reads: the files and the diagnosis stay whole.

    The console falls behind (and says so); the report is written while it is still
    blocked, from the files. Lines per rank: enough single writes to fill the console
    queue several times over.
    """
    count = 1200
    env, mark = marked_env(tmp_path, {"LINES": str(count)})
    logs = tmp_path / "logs"
    out_read, out_write = os.pipe()
    fcntl.fcntl(out_write, F_SETPIPE_SZ, 4096)
    with open(tmp_path / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(
            safelaunch_cmd(
                "--log-dir", str(logs), "--nproc-per-node=4", worker("flood_then_fail.py")
            ),
            cwd=tmp_path,
            env=env,
            stdout=out_write,
            stderr=err,
        )
    os.close(out_write)
    try:
        deadline = time.monotonic() + 60
        report = None
        while report is None and time.monotonic() < deadline and proc.poll() is None:
            found = list(logs.glob("*/attempt_0/report.json"))
            report = found[0] if found else None
            time.sleep(0.2)
        # the launcher may already have left (its console waits are bounded): look once more
        found = list(logs.glob("*/attempt_0/report.json"))
        report = found[0] if found else None
        assert report is not None, "no report while the console was blocked"
        time.sleep(0.5)  # written atomically? read it once it settled
        record = json.loads(report.read_text())
        assert "could not write checkpoint shard 3" in json.dumps(record["diagnosis"])
        for rank in range(4):
            log = (report.parent / f"rank{rank}.log").read_text()
            lines = [line for line in log.splitlines() if line.startswith(f"r{rank} line")]
            assert len(lines) == count
        assert (
            "RuntimeError: rank 0 could not write checkpoint shard 3"
            in (report.parent / "rank0.log").read_text()
        )
    finally:
        with os.fdopen(out_read, "rb") as out:
            shown = out.read()  # now the console drains
        code = proc.wait(timeout=60)
    assert code == 1
    stderr = (tmp_path / "stderr.txt").read_text()
    assert "console fell behind" in stderr, stderr[-2000:]
    assert b"[rank" in shown
    assert_no_orphans(mark, within=2.0)
