"""hangs/activity.py's TreeSampler: each rank's process tree from /proc, and after the first
pass only the job's processes and new ones are read (issue 29: the launcher's one cost
that grew with the machine, not the job)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from safelaunch.hangs import activity
from safelaunch.proctree import TreeScan, reach

# A rank that forks a worker when told to (a file appears), and the worker burns CPU.
RANK = """
import os, subprocess, sys, time
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.01)
burn = "import time\\nt = time.time()\\nwhile time.time() - t < 30: pass"
worker = subprocess.Popen([sys.executable, "-c", burn])
open(go + ".pid", "w").write(str(worker.pid))
worker.wait()
"""


@pytest.fixture
def rank(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    process = subprocess.Popen([sys.executable, "-c", RANK, str(tmp_path / "go")])
    try:
        yield process, tmp_path / "go"
    finally:
        for pid_file in tmp_path.glob("*.pid"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), 9)
        process.kill()
        process.wait()


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    read: list[int] = []
    real = activity._read_stat

    def counted(pid: int) -> tuple[int, bytes, float, float] | None:
        read.append(pid)
        return real(pid)

    monkeypatch.setattr(activity, "_read_stat", counted)
    return read


def test_after_the_first_pass_only_the_tree_and_new_processes_are_read(
    rank: tuple[subprocess.Popen[bytes], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    process, go = rank
    read = _counting(monkeypatch)
    sampler = activity.TreeSampler()  # _read_stat is looked up when the sampler is made
    roots = {0: process.pid}
    first = sampler.sample(roots, 0.0)
    assert 0 in first and len(read) > 3  # every process of the machine, once
    read.clear()
    again = sampler.sample(roots, 0.5)
    assert again[0].child_cpu == pytest.approx(first[0].child_cpu, abs=0.05)
    assert process.pid in read and os.getpid() not in read  # the test's own: outside
    assert len(read) <= 3, read  # the rank, and whatever started since

    go.write_text("")  # the rank forks a worker that computes: it is found, and counted
    deadline = time.monotonic() + 30
    while not Path(f"{go}.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # the pid file is written just after the worker starts
    worker = int(Path(f"{go}.pid").read_text())
    now = 1.0
    while time.monotonic() < deadline:
        usage = sampler.sample(roots, now)
        now += 0.5
        if usage[0].child_cpu - first[0].child_cpu >= 0.3:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the worker's CPU never counted: {usage}")
    read.clear()
    sampler.sample(roots, now)
    assert set(read) >= {process.pid, worker}


def test_other_ranks_or_a_long_pause_read_every_process_again(
    rank: tuple[subprocess.Popen[bytes], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    process, _ = rank
    read = _counting(monkeypatch)
    sampler = activity.TreeSampler()
    sampler.sample({0: process.pid}, 0.0)
    everyone = len(read)
    read.clear()
    sampler.sample({0: process.pid, 1: os.getpid()}, 0.5)  # the next attempt's ranks
    assert len(read) >= everyone // 2 and os.getpid() in read
    read.clear()
    sampler.sample({0: process.pid, 1: os.getpid()}, 0.5 + TreeScan.FORGET_AFTER + 1)
    assert len(read) >= everyone // 2


def test_a_process_that_left_the_listing_is_forgotten(
    rank: tuple[subprocess.Popen[bytes], Path],
) -> None:
    process, _ = rank
    scan = TreeScan(activity._read_stat)
    outsider = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        scan.scan([process.pid], 0.0)
        assert scan.outside(outsider.pid)
    finally:
        outsider.kill()
        outsider.wait()
    scan.scan([process.pid], 0.5)
    assert not scan.outside(outsider.pid)  # a new process under that pid is read


def test_the_keeper_records_the_launcher_s_tree_and_reads_little_else(
    rank: tuple[subprocess.Popen[bytes], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keeper's record of the launcher's tree (supervisor/keeper.py), here the test
    process's: the rank and, once forked, its worker; outsiders read once."""
    from safelaunch.supervisor import keeper, procs

    process, go = rank
    read: list[int] = []

    def counted(pid: int) -> tuple[int, procs.ProcessIdentity] | None:
        read.append(pid)
        return procs.identity(pid)

    scan = TreeScan(counted)
    recorded = keeper._record({}, os.getpid(), scan)
    assert process.pid in recorded and os.getpid() not in recorded
    everyone = len(read)
    read.clear()
    go.write_text("")
    deadline = time.monotonic() + 30
    while not Path(f"{go}.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    recorded = keeper._record(recorded, os.getpid(), scan)
    assert int(Path(f"{go}.pid").read_text()) in recorded
    assert len(read) < everyone, (read, everyone)


def test_a_process_whose_parent_ended_during_the_pass_is_read_again() -> None:
    """Its parent gone mid-pass, a process may be on its way to the launcher (a subreaper):
    it is not taken for an outsider until its chain is whole."""
    machine = {1: 0, 5: 1, 10: 1, 20: 5, 21: 20}  # pid -> parent; 10 the root
    gone: set[int] = set()
    reads: list[int] = []

    def read(pid: int) -> tuple[int, None] | None:
        reads.append(pid)
        return None if pid in gone else (machine[pid], None)

    scan = TreeScan(read, listing=lambda: sorted(machine))
    gone.add(20)  # 21's parent ends during the first pass
    assert set(scan.scan([10], 0.0)) == {10}
    assert scan.outside(1) and scan.outside(5) and not scan.outside(21)
    del machine[20]
    machine[21] = 10  # reparented to the subreaper
    reads.clear()
    assert set(scan.scan([10], 0.5)) == {10, 21}
    assert sorted(reads) == [10, 21]  # 1 and 5: known outsiders, not read again


def test_reach_names_each_descendant_once_even_when_reused_pids_close_a_loop() -> None:
    # 10 -> 11 -> 12, and 13 under 12 whose parent, read later, is a reused 11: a loop.
    tree = {10: (1, None), 11: (10, None), 12: (11, None), 13: (12, None), 14: (13, None)}
    assert sorted(reach(tree, [10])) == [11, 12, 13, 14]
    looped = {**tree, 11: (14, None)}  # 11 read again after its pid went to 14's child
    assert sorted(reach(looped, [12])) == [11, 12, 13, 14]
    assert sorted(reach(tree, [10, 11])) == [11, 12, 13, 14]  # a top below another: once
