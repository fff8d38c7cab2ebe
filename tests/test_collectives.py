"""Collective forensics on real Gloo ranks: the flight records say where the ranks diverge.

Every rank writes torch's flight recorder when the hang is declared (or, on a failure,
the survivors and the failing rank itself); safelaunch.flights.check compares them per
process group with torch's analyser, and the summary joins that with the stack verdict.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import launch, line_of, marked_env, safelaunch_cmd, worker

from safelaunch import exitcodes

pytestmark = pytest.mark.slow
SCHEMA = json.loads((Path(__file__).parents[1] / "docs" / "report.schema.json").read_text())
SCRIPT = worker("collective_cases.py")


def _run(tmp_path: Path, case: str, nproc: int, hang_timeout: float = 4):
    # 4 s, not less: under load `import torch` holds the GIL for seconds, and a rank's
    # heartbeat looks frozen meanwhile
    run = launch(
        tmp_path,
        f"--nproc-per-node={nproc}",
        f"--hang-timeout={hang_timeout}",
        "--shutdown-timeout=5",
        SCRIPT,
        env={"CASE": case},
        timeout=120,
    )
    report = json.loads((run.attempt() / "report.json").read_text())
    pytest.importorskip("jsonschema").validate(report, SCHEMA)
    return run, report


def test_rank_missing_from_a_new_group_collective_is_named_with_its_place(tmp_path: Path) -> None:
    run, report = _run(tmp_path, "subgroup", 3)
    assert run.returncode == exitcodes.HANG, run.stderr
    sleep = line_of(SCRIPT, "time.sleep(3600)")
    expected = (
        "collectives: group [1,2] (pg 1), collective #3 all_reduce(float32[1024]): rank 2 "
        f"never called it; rank 2 is in load_shard ({SCRIPT}:{sleep} in load_shard)"
    )
    assert expected in run.stderr
    # the finding that names the rank outside any collective comes first
    lines = [line for line in run.stderr.splitlines() if "collectives:" in line]
    assert lines[0].endswith(expected), lines
    assert (
        "group [0,1,2] (default group), collective #4 all_reduce(float32[4]): ranks 1,2"
        in (lines[1])
    )
    found = report["collectives"]
    assert found["recorded_ranks"] == [0, 1, 2] and found["analyser"] == "torch"
    first = found["divergences"][0]
    assert (first["group"], first["ranks"], first["seq"], first["kind"], first["missing"]) == (
        "1",
        [1, 2],
        3,
        "missing",
        [2],
    )
    assert sorted(p.name for p in (run.attempt() / "flight").iterdir()) == [
        "rank0.json",
        "rank1.json",
        "rank2.json",
    ]


def test_op_mismatch_and_p2p_deadlock_in_several_groups_at_once(tmp_path: Path) -> None:
    run, report = _run(tmp_path, "groups", 4)
    assert run.returncode == exitcodes.HANG, run.stderr
    broadcast = line_of(SCRIPT, "dist.broadcast(")
    assert (
        "collectives: group [0,1] (pg 1), collective #1 all_reduce(float32[8]): rank 1 called "
        f"broadcast(float32[8]) instead; rank 1 waits in broadcast ({SCRIPT}:{broadcast} in groups)"
    ) in run.stderr
    assert (
        "collectives: p2p deadlock (send/send): ranks 2,3 wait on each other: rank 2 "
        "send(float32[65536]) to rank 3; rank 3 send(float32[65536]) to rank 2"
    ) in run.stderr
    found = report["collectives"]
    assert [d["kind"] for d in found["divergences"]] == ["mismatch"]
    assert "COLLECTIVE_TYPE_MISMATCH" in found["divergences"][0]["detail"]  # torch's own words
    assert [(p["ranks"], p["kind"]) for p in found["p2p"]] == [([2, 3], "send/send")]


def test_survivors_of_a_failure_write_their_records(tmp_path: Path) -> None:
    run, report = _run(tmp_path, "fail", 2, hang_timeout=60)
    assert run.returncode == 1, run.stderr
    assert (
        "collectives: group [0,1] (default group), collective #2 all_reduce(float32[16]): "
        "rank 1 never called it; rank 1 exited with code 1"
    ) in run.stderr
    assert report["collectives"]["recorded_ranks"] == [0, 1]


def test_explain_reads_torchs_own_dumps_from_a_torchrun_run(tmp_path: Path, torchrun: str) -> None:
    script = worker("torch_dump_fail.py")
    env, _ = marked_env(
        tmp_path, {"TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "logs" / "trace_rank_")}
    )
    (tmp_path / "logs").mkdir()
    subprocess.run(
        [torchrun, "--nproc-per-node=2", "--log-dir", str(tmp_path / "logs"), "--tee", "3", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=120,
    )
    result = subprocess.run(
        safelaunch_cmd("explain", str(tmp_path / "logs")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "root cause: rank 1" in result.stdout
    assert "flight records: 2 file(s)" in result.stdout, result.stdout
    assert (
        "collectives: group [0,1] (default group), collective #2 all_reduce(float32[16]): "
        "rank 1 never called it"
    ) in result.stdout


def test_recv_recv_through_batch_isend_irecv(tmp_path: Path) -> None:
    run, report = _run(tmp_path, "batch", 2)
    assert run.returncode == exitcodes.HANG, run.stderr
    assert (
        "collectives: p2p deadlock (recv/recv): ranks 0,1 wait on each other: rank 0 "
        "recv(float32[8]) from rank 1; rank 1 recv(float32[8]) from rank 0"
    ) in run.stderr
    assert [p["kind"] for p in report["collectives"]["p2p"]] == ["recv/recv"]


def test_p2p_pairs_on_made_up_records() -> None:
    from safelaunch.flights.check import p2p_waits

    def calls(*pending: tuple[str, int]) -> dict:
        return {"safelaunch": {"p2p": [{"op": op, "peer": peer} for op, peer in pending]}}

    # a send facing its recv is in progress, not a deadlock
    assert p2p_waits({0: calls(("send", 1)), 1: calls(("recv", 0))}) == []
    found = p2p_waits({0: calls(("send", 1)), 1: calls(("send", 0)), 2: calls(("recv", 3))})
    assert [(f["ranks"], f["kind"], f["no_record"]) for f in found] == [
        ([0, 1], "send/send", False),
        ([2, 3], "unanswered", True),  # rank 3 left no record at all
    ]
