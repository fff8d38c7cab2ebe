"""`safelaunch status` against live Gloo jobs: one node, two nodes on loopback, --stacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import LONG, LiveJob, assert_no_orphans, start, status, wait_for, worker
from loopback import free_port

from safelaunch import exitcodes

JOB = worker("status_job.py")
# The first test using the shared hung job pays for it (a minute on a loaded machine);
# two nodes start two launchers that import torch.
pytestmark = pytest.mark.timeout(400)


def test_json_snapshot_of_a_live_job_names_the_straggler(hung_job: LiveJob) -> None:
    look = hung_job.looks[0]
    assert look["schema"] == "safelaunch.status/1" and look["state"] == "running"
    assert look["name"] == "attempt_0" and look["attempt"] == 0 and look["world_size"] == 2
    assert look["run_dir"] == str(hung_job.run_dir)
    assert look["attempt_dir"] == str(hung_job.run_dir / "attempt_0")
    ranks = {r["rank"]: r for r in look["ranks"]}
    assert set(ranks) == {0, 1}
    assert ranks[1]["frame"].startswith(f"{JOB}:") and ranks[1]["frame"].endswith(
        " in load_next_batch"
    )
    assert ranks[0]["frame"].startswith(f"{JOB}:")  # in backward(): DDP's all-reduce waits
    for rank in ranks.values():
        assert rank["state"] != "frozen" and rank["pid"] > 0
        assert rank["step"] == 3 and rank["step_inferred"]  # optimizer steps, counted by torch
        assert rank["usage"]["rss_bytes"] > 50 << 20 and rank["usage"]["cpu_percent"] is not None
        assert rank["usage"]["gpu_mib"] is None  # no NVML here
    assert ranks[1]["collectives"] < ranks[0]["collectives"]
    assert ranks[0]["idle_s"] >= 5.0  # waiting for rank 1, which prints: its output is progress
    assert ranks[1]["idle_s"] < 5.0
    said = look["suspicions"]
    assert any(
        s.startswith("straggler: rank 1 at collective #") and "the others" in s for s in said
    )
    assert not any(s.startswith("hang suspected") for s in said)  # rank 1 still speaks


def test_table_shows_one_line_per_rank(hung_job: LiveJob) -> None:
    lines = hung_job.table.splitlines()
    assert "attempt_0: running" in lines[0] and "2 of 2 ranks on 1 node" in lines[0]
    assert lines[1].split()[:6] == ["RANK", "NODE", "STATE", "STEP", "COLL", "IDLE"]
    assert lines[2].startswith("0 ") and lines[3].startswith("1 ")
    assert "~3" in lines[3] and "status_job.py:" in lines[3] and "load_next_batch" in lines[3]
    assert "\x1b[" not in hung_job.table  # colour only on a terminal
    assert any(line.startswith("! straggler: rank 1") for line in lines)


def test_stacks_are_dumped_live_without_disturbing_the_job(hung_job: LiveJob) -> None:
    out = hung_job.stacks.stdout
    assert hung_job.stacks.returncode == 0, hung_job.stacks.stderr
    rank1 = out[out.index("rank 1 (node 0") :]
    assert "most recent call first" in rank1 and "in load_next_batch" in rank1
    assert "in _engine_run_backward" in out[out.index("rank 0 (node 0") : out.index("rank 1 (")]
    assert hung_job.pids_alive_after_stacks  # nothing stopped or killed
    before, after = hung_job.stacks_file_sizes
    assert after == before  # the dump was cut again: the hang diagnosis reads its own
    assert hung_job.flight_records_after_stacks == []  # nor a flight record left behind
    # ... and the job went on to its own end: the hang, named as without status.
    assert hung_job.returncode == exitcodes.HANG, hung_job.stderr
    assert "likely culprit: rank 1: it is behind" in hung_job.stderr


def test_status_after_the_end(hung_job: LiveJob) -> None:
    final = hung_job.final
    assert final["state"] == "ended" and final["suspicions"] == []
    assert {r["state"] for r in final["ranks"]} == {"killed"}  # SIGTERM at the teardown
    assert all(r["idle_s"] is None for r in final["ranks"])


def test_no_run_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = status(tmp_path)
    assert result.returncode == exitcodes.USAGE
    assert result.stderr.startswith("safelaunch: error: no run under ")
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""
    result = status(tmp_path, "nonexistent-run")
    assert result.returncode == exitcodes.USAGE and "no run 'nonexistent-run'" in result.stderr


@pytest.mark.slow
@LONG
def test_two_nodes_node_0_shows_every_node_node_1_its_own(tmp_path: Path) -> None:
    """Only node 0 reads every node's snapshot through the store (O(N) in all, issue 29);
    node 1's launcher says where to look (its `node 1 of 2` line)."""
    port = free_port()
    started = []
    (tmp_path / "pids").mkdir()
    for node in (0, 1):
        where = tmp_path / f"node{node}"
        where.mkdir()
        flags = [
            "--nnodes=2",
            "--nproc-per-node=1",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            "--rdzv-id=status",
            "--rdzv-conf=keep_alive_interval=1,keep_alive_max_attempt=3",
            JOB,
        ]
        pids = str(tmp_path / "pids")  # one directory: one stop file ends both nodes
        started.append((where, *start(where, *flags, env={"EXPLICIT": "1", "PIDS_DIR": pids})))
    try:
        ready = tmp_path / "pids"
        wait_for(lambda: all((ready / f"ready-{r}").exists() for r in (0, 1)), 180, "step 2")

        def both(where: Path) -> dict | None:
            look = status(where, "--json")
            record = json.loads(look.stdout) if look.returncode == 0 else {}
            # Each node's copy of the other's state is a second or two old: past step 2 both.
            seen = [r for r in record.get("ranks", []) if (r["step"] or 0) >= 2]
            return record if len(seen) == 2 else None

        where = started[0][0]
        look = wait_for(lambda w=where: both(w), 20, "node 0 to show both nodes")
        own = json.loads(status(started[1][0], "--json").stdout)
        assert [r["rank"] for r in own["ranks"]] == [1] and own["world_size"] == 2
        assert look["nodes"] == [0, 1] and look["world_size"] == 2
        ranks = {r["rank"]: r for r in look["ranks"]}
        assert ranks[0]["node"] == 0 and ranks[1]["node"] == 1
        for rank in ranks.values():
            assert rank["state"] != "frozen" and rank["frame"] is not None
            assert rank["collectives"] >= 3 and not rank["step_inferred"]  # heartbeat(step=)
    finally:
        (tmp_path / "pids" / "stop").touch()
        for _, proc, mark in started:
            proc.communicate(timeout=60)
            assert_no_orphans(mark, within=3.0)
    assert [proc.returncode for _, proc, _ in started] == [0, 0]
    for where, _, _ in started:
        assert ((where / "logs" / "latest").resolve() / "report.html").exists()


def test_watch_of_an_ended_run_shows_it_once_and_returns(hung_job: LiveJob) -> None:
    result = status(hung_job.where, "--watch", "--interval=0.2")
    assert result.returncode == 0 and result.stdout.count("attempt_0: ended") == 1
    assert "\x1b[" not in result.stdout  # piped: no clearing, no colour


def test_state_files_are_readable_like_the_logs_and_the_heartbeats_stay_private(
    hung_job: LiveJob,
) -> None:
    attempt = hung_job.run_dir / "attempt_0"
    log_mode = (attempt / "rank0.log").stat().st_mode & 0o777
    for name in ("node0.json", "history-node0.json"):
        assert (attempt / "live" / name).stat().st_mode & 0o777 == log_mode
    snapshot = json.loads((attempt / "live" / "node0.json").read_text())
    private = Path(snapshot["private_dir"])  # the heartbeats: 0700, outside the run directory
    assert not private.is_relative_to(hung_job.run_dir) and not private.exists()  # removed


def test_watch_on_a_terminal_refreshes_in_place_with_colour(hung_job: LiveJob) -> None:
    import os
    import pty
    import subprocess

    from conftest import safelaunch_cmd

    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR" and "SAFELAUNCH" not in k}
    proc = subprocess.Popen(
        safelaunch_cmd("status", "--log-dir", str(hung_job.where / "logs"), "--watch"),
        stdout=slave,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=30) == 0
    text = out.decode()
    assert text.startswith("\x1b[H\x1b[2J")  # home, clear: the table is redrawn in place
    assert "\x1b[31m" in text and "killed" in text  # colour, on a terminal only
