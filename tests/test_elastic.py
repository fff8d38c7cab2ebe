"""Elastic membership on loopback (docs/multinode.md): --nnodes MIN:MAX on torch's c10d.

Each safelaunch process is a node. One is killed whole mid-training, and the two that
remain meet again in torch's rendezvous and finish the job on their own; one that starts
late is admitted at the next round; both, one after the other, in one job.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from conftest import LONG, assert_no_orphans, start, worker
from loopback import free_port

pytestmark = pytest.mark.slow
JOB = worker("elastic.py")
SCHEMA = json.loads((Path(__file__).parents[1] / "docs" / "report.schema.json").read_text())
# a lost node known within ~10 s (defaults.LOST_AFTER_FLOOR_S); a round closes 1 s after its
# last join. torch drops a node whose keep-alive is older than interval x attempts: at 1 s x
# 2 a survivor late by 2 s on a loaded machine, in the 10 s the others take to find the lost
# node, was dropped from torch's next round (its nodes told different rounds: CI, once);
# 1 s x 5 still drops the killed node before the survivors meet again.
FAST = "keep_alive_interval=1,keep_alive_max_attempt=5,last_call_timeout=1,join_timeout=60"
# A node waiting to join must get its entry into torch's rendezvous state (a read, then a
# compare-and-set) between the others' keep-alive writes, and torch drops a waiting node
# whose beat is older than interval x attempts: with a 1 s interval (x 2, once x 5) a
# loaded machine (load 30-55 on 2 cores) kept it out for the whole join_timeout in some
# runs. torch's default is 5 s x 3.
JOINING = FAST.replace("interval=1,keep_alive_max_attempt=5", "interval=2,keep_alive_max_attempt=3")


def _flags(port: int, node: int, conf: str = FAST) -> list[str]:
    return [
        "--nnodes=2:3",
        "--nproc-per-node=1",
        "--max-restarts=3",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=elastic",
        f"--rdzv-conf={conf},is_host={int(node == 0)}",  # the first hosts torch's store
        JOB,
    ]


def _wait_ready(tmp_path: Path, ranks: int, procs: list, group: str = "0-3") -> None:  # type: ignore[type-arg]
    """Until `ranks` ranks of the group `<restart count>-<world size>` trained a step."""
    deadline = time.monotonic() + 90
    while len(list(tmp_path.glob(f"node*/pids/ready-{group}-*"))) < ranks:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            for proc in procs:
                proc.kill()
            pytest.fail(f"ranks not ready: {[p.communicate() for p in procs]}")
        time.sleep(0.1)


def _report(tmp_path: Path, launcher: int, attempt: int) -> dict:  # type: ignore[type-arg]
    """A launcher's report.json of an attempt, checked against the documented schema."""
    run = (tmp_path / f"node{launcher}" / "logs" / "latest").resolve()
    report = json.loads((run / f"attempt_{attempt}" / "report.json").read_text())
    pytest.importorskip("jsonschema").validate(report, SCHEMA)
    return report  # type: ignore[no-any-return]


def test_a_lost_node_leaves_the_others_training_on(tmp_path: Path) -> None:
    port = free_port()
    started = []
    for n in range(3):
        where = tmp_path / f"node{n}"
        where.mkdir()
        started.append(start(where, *_flags(port, n), text=True))
    procs = [proc for proc, _ in started]
    began = time.monotonic()
    _wait_ready(tmp_path, 3, procs)
    print(f"ready after {time.monotonic() - began:.1f} s")
    began = time.monotonic()
    victim, survivors = procs[2], procs[:2]
    os.killpg(victim.pid, signal.SIGKILL)  # the node whole: its launcher's process group
    _, victim_err = victim.communicate(timeout=30)
    left = re.search(r"node (\d) of 3", victim_err)
    assert left is not None, victim_err
    results = [proc.communicate(timeout=120) for proc in survivors]
    print(f"survivors done {time.monotonic() - began:.1f} s after the kill")
    for (out, err), proc in zip(results, survivors, strict=True):
        assert proc.returncode == 0, err
        assert f"without node {left[1]} (" in err and "(lost in attempt 0)" in err, err
        assert re.search(r"node \d of 2 \(", err), err
        assert re.search(r"attempt 1: rank \d of 2 trained 3 steps", out), out
    for launcher in (0, 1):
        first = _report(tmp_path, launcher, 0)["job"]
        assert first["nodes"] == 3 and first["lost_nodes"] == [int(left[1])]
        last = _report(tmp_path, launcher, 1)
        assert last["status"] == "succeeded" and last["job"]["nodes"] == 2
        (change,) = last["membership"]
        assert change["attempt"] == 1 and change["left_in_attempt"] == 0
        assert change["nodes_before"] == 3 and change["nodes"] == 2
        assert change["left"][0].startswith(f"node {left[1]} (")
    for _, mark in started:
        assert_no_orphans(mark, within=5.0)


def _node(tmp_path: Path, port: int, n: int, finish: str) -> tuple:  # type: ignore[type-arg]
    where = tmp_path / f"node{n}"
    where.mkdir()
    return start(where, *_flags(port, n, JOINING), env={"FINISH_AT": finish}, text=True)


def test_a_node_that_starts_late_is_admitted_at_the_next_round(tmp_path: Path) -> None:
    port = free_port()
    started = [_node(tmp_path, port, n, finish="0:3") for n in range(2)]
    _wait_ready(tmp_path, 2, [p for p, _ in started], group="0-2")
    began = time.monotonic()
    started.append(_node(tmp_path, port, 2, finish="0:3"))
    results = [proc.communicate(timeout=120) for proc, _ in started]
    print(f"all done {time.monotonic() - began:.1f} s after the third node started")
    late = re.search(r"node (\d) of 3 \(", results[2][1])
    assert late is not None, results[2][1]
    for n, ((out, err), (proc, _)) in enumerate(zip(results, started, strict=True)):
        assert proc.returncode == 0, err
        # torchrun's count: admitting a node is not a restart
        assert re.search(r"attempt 0: rank \d of 3 trained 3 steps", out), out
        assert re.search(
            r"elastic: attempt 1: node \d \([^)]*\) joined: 2 -> 3 node\(s\); "
            r"not counted as a restart",
            err,
        ), err
        if n < 2:
            assert "rendezvous again for attempt 1 to admit the node(s) waiting to join" in err
            stopped = _report(tmp_path, n, 0)
            assert stopped["status"] == "rescaled" and stopped["job"]["status"] == "rescaled"
            assert stopped["exit_code"] == 0 and stopped["job"]["nodes"] == 2
        last = _report(tmp_path, n, 1)
        assert last["status"] == "succeeded" and last["job"]["nodes"] == 3
        (change,) = last["membership"]
        assert change["attempt"] == 1 and change["cause"] == "waiting"
        assert change["left"] == [] and change["restart_count"] == 0
        assert change["nodes_before"] == 2 and change["nodes"] == 3
        # every node names the same node: the late one, as this round numbers it
        assert change["joined"] == [f"node {late[1]} ({last['job']['hosts'][int(late[1])]})"]
    assert not (tmp_path / "node2" / "logs" / "latest" / "attempt_0").exists()
    for _, mark in started:
        assert_no_orphans(mark, within=5.0)


@pytest.mark.timeout(300)
@LONG  # ~60 s: each half is in CI above (a lost node; a node that starts late)
def test_down_to_min_and_back_up_in_one_job(tmp_path: Path) -> None:
    """3 nodes; one killed: 2 go on (a restart); a fresh one starts: 3 finish (not one)."""
    port = free_port()
    started = [_node(tmp_path, port, n, finish="1:3") for n in range(3)]
    procs = [proc for proc, _ in started]
    _wait_ready(tmp_path, 3, procs)
    os.killpg(procs[2].pid, signal.SIGKILL)
    _, victim_err = procs[2].communicate(timeout=30)
    gone = re.search(r"node (\d) of 3", victim_err)
    assert gone is not None, victim_err
    _wait_ready(tmp_path, 2, procs[:2], group="1-2")
    began = time.monotonic()
    started.append(_node(tmp_path, port, 3, finish="1:3"))
    running = [started[0], started[1], started[3]]
    results = [proc.communicate(timeout=120) for proc, _ in running]
    print(f"all done {time.monotonic() - began:.1f} s after the fresh node started")
    fresh = re.search(r"node (\d) of 3 \(", results[2][1])
    assert fresh is not None, results[2][1]
    for (out, err), (proc, _) in zip(results, running, strict=True):
        assert proc.returncode == 0, err
        assert re.search(r"attempt 1: rank \d of 3 trained 3 steps", out), out
        assert "joined: 2 -> 3 node(s); not counted as a restart (torchrun's rule), 1 of 3" in err
    for launcher in (0, 1):
        assert f"attempt 1: node {gone[1]} (" in results[launcher][1]
        assert "left: 3 -> 2 node(s); a restart, 1 of 3 used" in results[launcher][1]
        assert _report(tmp_path, launcher, 1)["status"] == "rescaled"
        lost, joined = _report(tmp_path, launcher, 2)["membership"]
        assert (lost["attempt"], lost["cause"], lost["left_in_attempt"]) == (1, "lost", 0)
        assert lost["left"][0].startswith(f"node {gone[1]} (") and lost["restart_count"] == 1
        assert (joined["attempt"], joined["cause"], joined["restart_count"]) == (2, "waiting", 1)
        assert joined["joined"][0].startswith(f"node {fresh[1]} (") and joined["nodes"] == 3
    (seen,) = _report(tmp_path, 3, 2)["membership"]  # the fresh node: the same change
    assert seen == _report(tmp_path, 0, 2)["membership"][1]
    for _, mark in started:
        assert_no_orphans(mark, within=5.0)
