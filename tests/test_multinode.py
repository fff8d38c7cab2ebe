"""Multi-node on loopback: two safelaunch processes are two nodes (torch's c10d/static)."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from pathlib import Path

import builders
import pytest
from conftest import assert_no_orphans, start, worker
from loopback import free_port

pytestmark = pytest.mark.slow
JOB = worker("multinode.py")
FAST = "keep_alive_interval=1,keep_alive_max_attempt=3"  # a lost node: within ~10 s (the floor)


def _start(tmp_path: Path, node: int, flags: list[str], env: dict[str, str] | None = None):
    where = tmp_path / f"node{node}"
    where.mkdir(exist_ok=True)
    return start(where, *flags, env=env, text=True)


def _two_nodes(tmp_path: Path, per_node, env=None, timeout: float = 120):
    started = [_start(tmp_path, n, per_node(n), env) for n in (0, 1)]
    results = []
    for proc, mark in started:
        out, err = proc.communicate(timeout=timeout)
        results.append((proc.returncode, out, err))
        assert_no_orphans(mark, within=3.0)
    return results


def _c10d(port: int, *extra: str):
    def flags(node: int) -> list[str]:
        return [
            "--nnodes=2",
            "--nproc-per-node=2",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            "--rdzv-id=job1",
            f"--rdzv-conf={FAST}",
            *extra,
            JOB,
        ]

    return flags


SCHEMA = json.loads((Path(__file__).parents[1] / "docs" / "report.schema.json").read_text())


def _report(tmp_path: Path, node: int, attempt: int = 0) -> dict:
    """A node's report.json of an attempt, checked against the documented schema."""
    run = (tmp_path / f"node{node}" / "logs" / "latest").resolve()
    report = builders.read_report(run / f"attempt_{attempt}")
    pytest.importorskip("jsonschema").validate(report, SCHEMA)
    return report


def test_two_nodes_train_with_torchruns_rank_assignment(tmp_path: Path) -> None:
    results = _two_nodes(tmp_path, _c10d(free_port()))
    for node, (code, out, err) in enumerate(results):
        assert code == 0, err
        for local in (0, 1):
            rank = 2 * node + local
            assert (
                f"[node{node}/rank{rank}]: trained RANK={rank} LOCAL_RANK={local} "
                f"GROUP_RANK={node} WORLD_SIZE=4 world=4"
            ) in out
        assert f"node {node} of 2" in err and f"ranks {2 * node}-{2 * node + 1} of 4" in err


def test_static_rendezvous(tmp_path: Path) -> None:
    port = free_port()

    def flags(node: int) -> list[str]:
        return [
            "--nnodes=2",
            "--nproc-per-node=2",
            f"--node-rank={node}",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            f"--rdzv-conf={FAST}",
            JOB,
        ]

    results = _two_nodes(tmp_path, flags)
    assert [code for code, _, _ in results] == [0, 0], results[1][2]
    assert "[node1/rank3]: trained RANK=3 LOCAL_RANK=1 GROUP_RANK=1" in results[1][1]


def test_a_rank_failing_on_one_node_restarts_every_node(tmp_path: Path) -> None:
    results = _two_nodes(tmp_path, _c10d(free_port(), "--max-restarts=1"), env={"FAIL_RANK": "3"})
    assert [code for code, _, _ in results] == [0, 0], results[0][2]
    for node in (0, 1):
        first = _report(tmp_path, node, 0)["job"]
        assert first["status"] == "failed" and first["root_node"] == 1
        again = _report(tmp_path, node, 1)["job"]
        assert again["status"] == "succeeded" and again["exit_code"] == 0


def test_the_first_node_names_the_culprit_on_another_node(tmp_path: Path) -> None:
    results = _two_nodes(tmp_path, _c10d(free_port()), env={"FAIL_RANK": "3"})
    assert [code for code, _, _ in results] == [1, 1]  # the root cause's code on every node
    node0 = results[0][2]
    assert "job (2 nodes): FAILED on node 1" in node0
    assert "rank 3 exited with code 1" in node0 and "RuntimeError: rank 3 broke" in node0
    assert f"{JOB}:" in node0  # the file:line in the user's script, from the other node


def test_a_hang_is_placed_on_the_node_where_the_culprit_is(tmp_path: Path) -> None:
    results = _two_nodes(tmp_path, _c10d(free_port(), "--hang-timeout=3"), env={"HANG_RANK": "3"})
    assert [code for code, _, _ in results] == [124, 124], results[0][2]
    for _, _, err in results:  # the job's verdict, weighed from both nodes' evidence
        assert "job (2 nodes): HUNG: culprit: rank 3 (node 1, host " in err, err
    job = _report(tmp_path, 0)["job"]
    culprit_node = job["root_node"]
    report = _report(tmp_path, culprit_node)
    assert report["hang"]["culprits"] == [3]  # found where rank 3 runs, even if the other
    # node noticed first: a node told of a hang takes its own ranks' stacks too


LONG = pytest.mark.skipif(
    not os.environ.get("SAFELAUNCH_LONG_TESTS"), reason="opt-in (SAFELAUNCH_LONG_TESTS=1): minutes"
)


@pytest.mark.parametrize(
    ("gap", "conf"),
    [
        # CI: short liveness settings; the node that finished waits the gap out (on the
        # code before, a gap past its grace of 2 + 3 + 30 s made it exit 69: see below)
        (5, [f"--rdzv-conf={FAST}", "--shutdown-timeout=2"]),
        # opt-in: the literal case, torchrun's defaults, rank 0 working 90 s longer
        # (past the fixed grace of shutdown 30 + keep-alive 15 + 30 s the node had before)
        pytest.param(90, [], marks=[LONG, pytest.mark.timeout(600)]),
    ],
)
def test_a_finished_node_waits_for_a_late_one_and_both_succeed(
    tmp_path: Path, gap: int, conf: list[str]
) -> None:
    port = free_port()

    def flags(node: int) -> list[str]:
        shared = [f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=late", *conf, JOB]
        return ["--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d", *shared]

    started = time.monotonic()
    results = _two_nodes(
        tmp_path, flags, env={"LATE_RANK": "0", "LATE_SECONDS": str(gap)}, timeout=gap + 180
    )
    wall = time.monotonic() - started
    print(f"gap {gap} s: both nodes done after {wall:.1f} s")
    assert [code for code, _, _ in results] == [0, 0], results[1][2]
    assert f"[node0/rank0]: saved after {gap} s more" in results[0][1]
    early = results[1][2]
    assert "this node is done; waiting for the job's verdict from node 0" in early
    assert "lost" not in early
    for node in (0, 1):
        assert _report(tmp_path, node)["job"]["status"] == "succeeded"


def test_a_launcher_starved_past_the_bound_stops_its_ranks_when_it_runs_again(
    tmp_path: Path,
) -> None:
    """Node 1's launcher is stopped (SIGSTOP: a launcher starved of CPU) for longer than the
    liveness bound while its ranks idle: node 0 takes it for lost and stops its own ranks.
    When node 1's launcher runs again it must stop its ranks and end too, although none of
    them failed (with --hang-timeout 0 nothing else would end them: 16 nodes on 2 cores
    waited so for ever in bench/scale.py)."""
    port = free_port()
    started = [
        _start(
            tmp_path,
            n,
            _c10d(port, f"--rdzv-conf={FAST},is_host={1 - n}", "--hang-timeout=0")(n),
            {"IDLE": "1"},
        )
        for n in (0, 1)
    ]
    (watcher, mark0), (starved, mark1) = started
    _wait_ready(tmp_path, 4, [watcher, starved])
    os.kill(starved.pid, signal.SIGSTOP)
    try:
        _, err0 = watcher.communicate(timeout=60)
    finally:
        os.kill(starved.pid, signal.SIGCONT)
    _, err1 = starved.communicate(timeout=60)
    assert watcher.returncode == 69, err0
    assert "node 1 (" in err0 and "gave no sign of life for more than 10 s" in err0, err0
    # node 0 hosts the store: node 1 finds itself given up, or the store gone with node 0
    assert "took this node for lost" in err1 or "rendezvous store" in err1, err1
    assert starved.returncode != 0, err1
    assert_no_orphans(mark0, within=3.0)
    assert_no_orphans(mark1, within=5.0)


def _wait_ready(tmp_path: Path, ranks: int, procs) -> None:
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("node*/pids/ready-*"))) < ranks:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            for proc in procs:  # FOREVER ranks: communicate() alone would wait for ever
                proc.kill()  # the ranks die with their launcher
            pytest.fail(f"ranks not ready: {[p.communicate() for p in procs]}")
        time.sleep(0.1)


def test_a_killed_node_is_reported_by_the_other_within_the_bound(tmp_path: Path) -> None:
    port = free_port()
    started = [
        # node 0 hosts the rendezvous store: the node killed is the one that does not
        _start(tmp_path, n, _c10d(port, f"--rdzv-conf={FAST},is_host={1 - n}")(n), {"FOREVER": "1"})
        for n in (0, 1)
    ]
    (survivor, mark0), (victim, mark1) = started
    _wait_ready(tmp_path, 4, [survivor, victim])
    killed_at = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    _, err = survivor.communicate(timeout=60)
    noticed_after = time.monotonic() - killed_at
    victim.communicate()
    assert survivor.returncode == 69, err  # a node of the job was lost
    assert "was lost: its launcher gave no sign of life for more than 10 s" in err
    job = err[err.index("job (2 nodes): ") :]
    assert job.startswith("job (2 nodes): node 1 (") or job.startswith("job (2 nodes): node 0 (")
    assert "FAILED on node" not in job  # the survivor's own failures are consequences
    # The bound is the feature: 10 s without a sign of life, plus teardown; without it the
    # survivor would wait forever (30 s: margin for a loaded machine).
    assert noticed_after < 30, noticed_after
    report = json.loads(
        (
            (tmp_path / "node0" / "logs" / "latest").resolve() / "attempt_0" / "report.json"
        ).read_text()
    )
    assert report["job"]["lost_nodes"] and report["job"]["exit_code"] == 69
    assert_no_orphans(mark1, within=5.0)  # the dead launcher's ranks die with it
    assert_no_orphans(mark0, within=3.0)


def test_a_version_mismatch_stops_every_node_before_training(tmp_path: Path) -> None:
    fixtures = Path(__file__).parent / "fixtures" / "inventories"
    port = free_port()
    started = [
        _start(
            tmp_path,
            n,
            _c10d(port)(n),
            {
                "SAFELAUNCH_GPU_INVENTORY": str(
                    fixtures / ("four_gpus.json", "mixed_models.json")[n]
                )
            },
        )
        for n in (0, 1)
    ]
    for proc, mark in started:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 78, err
        assert "differs between nodes" in err and "visible GPUs" in err
        assert "trained" not in err
        assert_no_orphans(mark, within=3.0)
    assert not list(tmp_path.glob("node*/pids/ready-*"))  # no rank ever ran


def test_no_flags_inside_slurm(tmp_path: Path) -> None:
    job = str(random.randint(100000, 999999))

    def slurm(node: int) -> dict[str, str]:
        return {
            "SLURM_JOB_ID": job,
            "SLURM_JOB_NUM_NODES": "2",
            "SLURM_NODEID": str(node),
            "SLURM_JOB_NODELIST": "localhost",
            "SLURM_GPUS_ON_NODE": "2",
        }

    started = [_start(tmp_path, n, [f"--rdzv-conf={FAST}", JOB], slurm(n)) for n in (0, 1)]
    for node, (proc, mark) in enumerate(started):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert (
            "from SLURM (flags win): nnodes=2 (SLURM_JOB_NUM_NODES), node_rank="
            f"{node} (SLURM_NODEID), master_addr=localhost (first host of SLURM_JOB_NODELIST)"
        ) in err
        assert f"rdzv_id={job} (SLURM_JOB_ID), nproc_per_node=2 (SLURM_GPUS_ON_NODE)" in err
        assert f"trained RANK={2 * node + 1}" in out
        assert_no_orphans(mark, within=3.0)


def test_scancel_sigterm_on_every_node_ends_the_job_as_slurm_expects(tmp_path: Path) -> None:
    port = free_port()
    started = [_start(tmp_path, n, _c10d(port)(n), {"FOREVER": "1"}) for n in (0, 1)]
    procs = [proc for proc, _ in started]
    _wait_ready(tmp_path, 4, procs)
    for proc in procs:  # scancel (and the time limit) signal every task of the step
        proc.send_signal(signal.SIGTERM)
    for node, (proc, mark) in enumerate(started):
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        assert _report(tmp_path, node)["status"] == "interrupted"
        assert_no_orphans(mark, within=3.0)


def test_a_node_stopped_by_a_peers_interrupt_is_interrupted_too(tmp_path: Path) -> None:
    """scancel reaching node 1 first: node 0 stops on node 1's announcement alone."""
    port = free_port()
    started = [_start(tmp_path, n, _c10d(port)(n), {"FOREVER": "1"}) for n in (0, 1)]
    procs = [proc for proc, _ in started]
    _wait_ready(tmp_path, 4, procs)
    procs[1].send_signal(signal.SIGTERM)
    for node, (proc, mark) in enumerate(started):
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        report = _report(tmp_path, node)
        assert (report["status"], report["exit_code"]) == ("interrupted", 143), err
        assert_no_orphans(mark, within=3.0)


def test_elastic_node_count_takes_whoever_joins_up_to_max(tmp_path: Path) -> None:
    port = free_port()

    def flags(node: int) -> list[str]:
        return [*_c10d(port)(node)[:1], "--nnodes=1:2", *_c10d(port)(node)[1:]]

    results = _two_nodes(tmp_path, flags)
    assert [code for code, _, _ in results] == [0, 0], results[0][2]
    assert "WORLD_SIZE=4" in results[0][1] and "WORLD_SIZE=4" in results[1][1]


def test_an_unreachable_store_is_said_within_seconds_with_what_was_tried(
    tmp_path: Path,
) -> None:
    """Node 1 of a static rendezvous; nothing listens at node 0's address and port.

    The bound is the feature (torch alone says nothing until its timeout): the line
    comes ~3 s after the wait begins, asserted with a wide margin for a loaded machine.
    """
    port = free_port()
    flags = ["--nnodes=2", "--node-rank=1", "--master-addr=127.0.0.1", f"--master-port={port}"]
    proc, mark = _start(
        tmp_path, 1, [*flags, "--rdzv-conf=join_timeout=30", "--nproc-per-node=1", JOB]
    )
    waiting_at = None
    said = ""
    try:
        for line in proc.stderr:
            if "waiting for 2 node(s)" in line:
                waiting_at = time.monotonic()
            if "cannot reach" in line:
                said = line
                break
        assert waiting_at is not None and said, said
        assert time.monotonic() - waiting_at < 20
        assert f"cannot reach 127.0.0.1:{port} yet" in said
        assert "127.0.0.1: connection refused" in said and "join_timeout (30 s)" in said
        assert proc.poll() is None  # it keeps waiting: a node that starts later is normal
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert_no_orphans(mark, within=3.0)


def _nodes(tmp_path: Path, count: int, per_node, env=None, timeout: float = 150):
    started = [_start(tmp_path, n, per_node(n), env) for n in range(count)]
    results = []
    for proc, mark in started:
        out, err = proc.communicate(timeout=timeout)
        results.append((proc.returncode, out, err))
        assert_no_orphans(mark, within=3.0)
    return results


def test_every_node_prints_the_same_job_verdict_naming_a_rank_stuck_on_one(
    tmp_path: Path,
) -> None:
    """4 nodes x 2 ranks, one rank (drawn) asleep before a collective: each node judged only
    its own ranks, and six of eight ranks' nodes saw nothing odd; the job verdict is one."""
    nodes, culprit = 4, random.Random(24).randrange(8)
    port = free_port()

    def flags(node: int) -> list[str]:
        return ["--nnodes=4", *_c10d(port, "--hang-timeout=3")(node)[1:]]

    results = _nodes(tmp_path, nodes, flags, env={"HANG_RANK": str(culprit)})
    assert [code for code, _, _ in results] == [124] * nodes, results[0][2]
    sleep_line = next(
        i for i, line in enumerate(Path(JOB).read_text().splitlines(), 1) if "time.sleep" in line
    )
    verdicts = set()
    for _, _, err in results:
        lines = [text for text in err.splitlines() if "job (4 nodes): HUNG: culprit:" in text]
        assert len(lines) == 1, err
        verdicts.add(lines[0].split("job (4 nodes): ", 1)[1])
        assert "look for a cause outside the job" not in err  # no node says so of its part
        assert "culprit: ranks" not in err, err  # no node names ranks it does not run
    (verdict,) = verdicts  # the same words on every node
    node = culprit // 2
    assert f"culprit: rank {culprit} (node {node}, host " in verdict, verdict
    assert f"{JOB}:{sleep_line} in <module>" in verdict, verdict
    for n in range(nodes):
        job = _report(tmp_path, n)["job"]
        assert [c["rank"] for c in job["culprits"]] == [culprit]
        assert job["culprits"][0]["node"] == node and job["root_node"] == node


@pytest.mark.parametrize("kind", ["failing", "lost"])
def test_four_nodes_print_one_verdict_for_a_failing_rank_or_a_lost_node(
    tmp_path: Path, kind: str
) -> None:
    """4 nodes x 2 ranks: one rank (drawn) raises, or one node's launcher (drawn) is
    SIGKILLed; every node that is left prints the same job line, naming that rank or node."""
    from safelaunch.launch import MULTINODE_NO_RERUN

    rng = random.Random(f"four-{kind}-{os.getpid()}")
    nodes, port = 4, free_port()

    def flags(node: int) -> list[str]:
        # node 0 hosts the rendezvous store, so a lost node is never the store's
        conf = f"--rdzv-conf={FAST},is_host={int(node == 0)}"
        return ["--nnodes=4", *_c10d(port, conf)(node)[1:]]

    if kind == "failing":
        culprit = rng.randrange(nodes * 2)
        results = _nodes(tmp_path, nodes, flags, env={"FAIL_RANK": str(culprit)})
        errs = [err for _, _, err in results]
        assert [code for code, _, _ in results] == [1] * nodes, errs[0]
        expected = f"FAILED on node {culprit // 2}"
    else:
        victim = rng.randrange(1, nodes)
        started = [_start(tmp_path, n, flags(n), {"FOREVER": "1"}) for n in range(nodes)]
        _wait_ready(tmp_path, nodes * 2, [proc for proc, _ in started])
        os.kill(started[victim][0].pid, signal.SIGKILL)
        errs, codes = [], []
        for n, (proc, mark) in enumerate(started):
            _, err = proc.communicate(timeout=90)
            assert_no_orphans(mark, within=5.0)
            if n != victim:
                errs.append(err)
                codes.append(proc.returncode)
        assert codes == [69] * (nodes - 1), errs[0]
        expected = f"node {victim} ("
        for err in errs:  # a node's own lines name no rank of a node that is left
            assert "culprit: ranks" not in err, err
            named = {int(r) for r in re.findall(r"culprit: rank (\d+)", err)}
            assert named <= {2 * victim, 2 * victim + 1}, err
    verdicts = set()
    for err in errs:
        lines = [text for text in err.splitlines() if "job (4 nodes): " in text]
        assert len(lines) == 1, err
        verdicts.add(lines[0].split("job (4 nodes): ", 1)[1])
        if kind == "failing":  # said once, on every node, instead of a rerun
            assert MULTINODE_NO_RERUN in err
    (verdict,) = verdicts  # the same words on every node left
    assert verdict.startswith(expected), verdict
