"""The pure parts of `safelaunch status`: judging snapshots with a given clock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from safelaunch.status.model import LAUNCHER_GONE_AFTER, Usage, judge

NOW = 1000.0


def _rank(rank: int, **fields: Any) -> dict[str, Any]:
    record = {
        "rank": rank,
        "pid": 100 + rank,
        "state": "running",
        "returncode": None,
        "bootstrapped": True,
        "beat_at": NOW - 0.5,
        "last_progress": NOW - 1,
        "step": None,
        "optimizer_steps": 7,
        "collectives": 20,
        "busy": False,
        "frames": [["/home/me/train.py", 12, "main"]],
    }
    record.update(fields)
    return record


def _node(*ranks: dict[str, Any], **fields: Any) -> dict[str, Any]:
    node = {
        "run_id": "r",
        "name": "attempt_0",
        "attempt": 0,
        "node": 0,
        "host": "h",
        "world_size": len(ranks),
        "started_at": NOW - 100,
        "written_at": NOW - 1,
        "state": "running",
        "hang_timeout_s": 300.0,
        "heartbeat_interval_s": 2.0,
        "ranks": list(ranks),
    }
    node.update(fields)
    return node


def test_a_healthy_job_raises_no_suspicion() -> None:
    # Uneven for a moment (one rank a collective ahead) and quiet for a while: healthy.
    status = judge(
        [_node(_rank(0, collectives=21, last_progress=NOW - 3), _rank(1, busy=True))], NOW, {}
    )
    assert status.state == "running" and status.suspicions == ()
    assert [r.step for r in status.ranks] == [7, 7] and status.ranks[0].step_inferred
    assert [r.state for r in status.ranks] == ["running", "computing"]
    assert status.ranks[0].frame == "/home/me/train.py:12 in main"
    assert status.elapsed_s == 100


@pytest.mark.parametrize(
    ("ranks", "said"),
    [
        (
            [_rank(0, collectives=21, last_progress=NOW - 9), _rank(1, last_progress=NOW - 9)],
            "straggler: rank 1 at collective #20, the others at #21 wait for it",
        ),
        ([_rank(0, step=10), _rank(1, step=8), _rank(2, step=10)], "straggler: rank 1 2+ steps"),
        ([_rank(0), _rank(1, beat_at=NOW - 30)], "rank 1: heartbeat stopped"),
        (
            [_rank(0, last_progress=NOW - 200), _rank(1, last_progress=NOW - 160)],
            "hang suspected: no rank made progress for 160 s (safelaunch declares a hang at 300 s)",
        ),
    ],
)
def test_suspicions(ranks: list[dict[str, Any]], said: str) -> None:
    status = judge([_node(*ranks)], NOW, {})
    assert any(s.startswith(said) for s in status.suspicions), status.suspicions


def test_explicit_step_wins_and_ended_ranks_have_no_idle_time() -> None:
    ranks = [
        _rank(0, step=3),
        _rank(1, state="exited", returncode=1),
        _rank(2, returncode=-15, state="exited"),
    ]
    status = judge([_node(*ranks)], NOW, {100: Usage(cpu_percent=50.0)})
    assert status.ranks[0].step == 3 and not status.ranks[0].step_inferred
    assert status.ranks[0].usage.cpu_percent == 50.0
    assert [r.state for r in status.ranks] == ["running", "failed", "killed"]
    assert [r.idle_s for r in status.ranks] == [1.0, None, None]


def test_a_silent_launcher_is_called_gone_and_nodes_are_merged() -> None:
    other = _node(_rank(1), node=1, host="h2", written_at=NOW - LAUNCHER_GONE_AFTER - 1)
    status = judge([_node(_rank(0)), other], NOW, {})
    assert status.state == "running" and status.nodes == (0, 1)
    assert [(r.rank, r.node, r.host) for r in status.ranks] == [(0, 0, "h"), (1, 1, "h2")]
    gone = judge([other], NOW, {})
    assert gone.state == "launcher gone" and gone.suspicions == ()


def test_damaged_snapshot_fields_do_not_break_status() -> None:
    status = judge([_node(_rank(0, frames=[["x"], 3, None], step="7", collectives=True))], NOW, {})
    assert status.ranks[0].step == 7 and status.ranks[0].collectives is None  # optimizer steps


def test_status_never_imports_torch() -> None:
    code = (
        "import sys, safelaunch.cli, safelaunch.status, safelaunch.status.measure,"
        "safelaunch.hangs.live_dump; assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_plain_launch_never_imports_psutil() -> None:
    code = (
        "import sys, safelaunch.cli, safelaunch.launch, safelaunch.view;"
        "assert 'psutil' not in sys.modules and 'safelaunch.status' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_measure_counts_the_rank_and_its_children_and_their_gpu_memory(tmp_path) -> None:
    import json
    import time

    from safelaunch.status.measure import measure

    child = "import time; x = bytearray(96 << 20); time.sleep(60)"
    rank = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time;"
            f"subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(60)",
        ]
    )
    try:
        deadline = time.monotonic() + 30
        import psutil

        while time.monotonic() < deadline:
            children = psutil.Process(rank.pid).children()
            if children and children[0].memory_info().rss > 96 << 20:
                break
            time.sleep(0.1)
        worker = children[0].pid
        inventory = tmp_path / "gpus.json"  # the one seam for GPUs: a recorded inventory
        gpu = {
            "index": 0,
            "uuid": "GPU-0",
            "name": "H100",
            "memory_total_mib": 81920,
            "memory_used_mib": 1500,
            "processes": [{"pid": worker, "memory_mib": 1500}],
        }
        inventory.write_text(json.dumps({"gpus": [gpu]}))
        usage = measure([(rank.pid, time.time())], {"SAFELAUNCH_GPU_INVENTORY": str(inventory)})
        assert usage[rank.pid].rss_bytes > 96 << 20  # the child's memory counts
        assert usage[rank.pid].gpu_mib == 1500 and usage[rank.pid].cpu_percent is not None
        assert measure([(rank.pid, time.time() - 3600)]) == {}  # a reused pid is not the rank
    finally:
        for process in psutil.Process(rank.pid).children():
            process.kill()
        rank.kill()
        rank.wait()


def test_measure_reads_a_rank_whose_process_name_holds_spaces_and_parentheses() -> None:
    """/proc/<pid>/stat puts the name in parentheses: the fields after it are still read."""
    import os
    import time

    from safelaunch.status import measure as measuring

    name = "a) b (c 1 2"
    code = f"open('/proc/self/comm', 'w').write({name!r}); import time; time.sleep(30)"
    rank = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 30
        comm = Path(f"/proc/{rank.pid}/comm")
        while comm.read_text().strip() != name and time.monotonic() < deadline:
            time.sleep(0.05)
        sample = measuring._sample(rank.pid)
        assert sample is not None and sample.parent == os.getpid() and sample.rss_pages > 0
        usage = measuring.measure([(rank.pid, time.time())])
        assert usage[rank.pid].rss_bytes > 1 << 20
        assert usage[rank.pid].cpu_percent is not None and usage[rank.pid].cpu_percent >= 0
    finally:
        rank.kill()
        rank.wait()


def test_the_header_shows_the_learned_deadline_of_the_slowest_node() -> None:
    from safelaunch.status.render import table

    learned = {"hang_deadline_s": 7.0, "hang_deadline_why": "7 s (auto: the floor)"}
    slower = {"hang_deadline_s": 30.0, "hang_deadline_why": "30 s (auto: 3 x the median gap 10 s)"}
    nodes = [_node(_rank(0), **learned), _node(_rank(1), node=1, **slower)]
    status = judge(nodes, NOW, {})
    assert status.hang_timeout_s == 30.0
    assert "hang deadline 30 s (auto: 3 x the median gap 10 s)" in table(status, Path("run"))
    fixed = judge([_node(_rank(0))], NOW, {})  # --hang-timeout N: no learned deadline
    assert "hang timeout 300 s" in table(fixed, Path("run"))
