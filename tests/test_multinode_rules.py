"""Multi-node rules without a second node: SLURM values, rank assignment, facts, verdicts."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import pytest
from conftest import launch, worker

from safelaunch.config import build_config
from safelaunch.diagnose import diagnose
from safelaunch.diagnose.nodes import NodeSummary, conclude_job, node_summary, project, read_summary
from safelaunch.errors import ConfigError
from safelaunch.outcome import outcome_of
from safelaunch.plan import LaunchPlan, RunIdentity
from safelaunch.rendezvous import Placement, assign, fact_mismatches, stops
from safelaunch.rendezvous.membership import Joined, Membership
from safelaunch.rendezvous.reach import probe_target
from safelaunch.report_json import job_record, report_record
from safelaunch.slurm import first_host, in_step, node_name, slurm_defaults, slurm_unread
from safelaunch.supervisor import AttemptRecord, RankExit
from safelaunch.supervisor.teardown import TeardownCause


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [
        ("gpu-[01-03,07]", "gpu-01"),
        ("gpu-[07,01-03]", "gpu-07"),  # SLURM's order is kept
        ("node17", "node17"),
        ("a[1-2],b[3-4]", "a1"),
        ("rack[1-2]-gpu[08-09]", "rack1-gpu08"),
    ],
)
def test_first_host_of_a_slurm_node_list(nodelist: str, first: str) -> None:
    assert first_host(nodelist) == first


def test_a_bad_node_list_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="is not a valid host list"):
        first_host("gpu-[01-")


SLURM = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NUM_NODES": "4",
    "SLURM_NODEID": "2",
    "SLURM_JOB_NODELIST": "gpu-[01-03,07]",
    "SLURM_GPUS_ON_NODE": "8",
}


def test_slurm_gives_every_value_and_says_where_from() -> None:
    assert slurm_defaults(SLURM) == {
        "nnodes": ("4", "SLURM_JOB_NUM_NODES"),
        "node_rank": (2, "SLURM_NODEID"),
        "master_addr": ("gpu-01", "first host of SLURM_JOB_NODELIST"),
        "master_port": (24242, "derived from SLURM_JOB_ID"),
        "rdzv_id": ("4242", "SLURM_JOB_ID"),
        "nproc_per_node": ("8", "SLURM_GPUS_ON_NODE"),
    }
    assert slurm_defaults({}) == {}
    one_node = slurm_defaults({"SLURM_JOB_ID": "1", "SLURM_NNODES": "1"})
    assert one_node == {"nnodes": ("1", "SLURM_NNODES")}


UNREADABLE_COUNTS = ["٤", "4x", "١٢", "０", "0", "-1", "2000", " 4", "4.0", "nan"]


@pytest.mark.parametrize("gpus", UNREADABLE_COUNTS)
def test_an_unreadable_slurm_gpu_count_is_said_not_dropped(gpus: str) -> None:
    environ = {"SLURM_JOB_ID": "1", "SLURM_NNODES": "1", "SLURM_GPUS_ON_NODE": gpus}
    assert "nproc_per_node" not in slurm_defaults(environ)
    config = build_config(_raw(), environ, explicit=frozenset())
    assert config.nproc_per_node == 1  # the default, and said so:
    (line,) = config.slurm_unread
    assert f"SLURM_GPUS_ON_NODE={gpus!r}" in line and "--nproc-per-node" in line
    # a flag that decides the rank count makes the variable moot: no warning
    given = build_config(_raw(nproc_per_node="2"), environ, explicit=frozenset({"nproc_per_node"}))
    assert given.slurm_unread == ()


def test_every_slurm_variable_read_is_used_refused_or_warned_about() -> None:
    readable = {**SLURM, "SLURM_GPUS_ON_NODE": "8"}
    assert (
        slurm_unread(readable) == {}
        and build_config(_raw(), readable, explicit=frozenset()).slurm_unread == ()
    )
    # the job id only names the run, but the master port is derived from it
    config = build_config(_raw(), {**SLURM, "SLURM_JOB_ID": "job٤"}, explicit=frozenset())
    (line,) = config.slurm_unread
    assert "SLURM_JOB_ID='job٤'" in line and "--master-port" in line
    assert config.master_port == 20000
    for name in ("SLURM_JOB_NUM_NODES", "SLURM_NODEID", "SLURM_JOB_NODELIST"):  # refused
        with pytest.raises(ConfigError, match=name):
            slurm_defaults({**SLURM, name: "٤[" if "LIST" in name else "٤"})


def test_a_launch_under_an_unreadable_slurm_gpu_count_warns_once(tmp_path) -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_NNODES": "1", "SLURM_GPUS_ON_NODE": "٤"}
    run = launch(tmp_path, worker("dump_env.py"), env=env)
    assert run.returncode == 0, run.stderr
    said = [line for line in run.stderr.splitlines() if "SLURM_GPUS_ON_NODE" in line]
    assert len(said) == 1 and "'٤'" in said[0] and "warning" in said[0], run.stderr
    assert sorted(p.name for p in (tmp_path / "pids").glob("env*.json")) == ["env0.json"]


def _raw(**changes: object) -> dict[str, object]:
    raw: dict[str, object] = {
        "training_script": "train.py",
        "training_script_args": (),
        "nnodes": "1:1",
        "nproc_per_node": "1",
        "rdzv_backend": "static",
        "rdzv_endpoint": "",
        "rdzv_id": None,
        "rdzv_conf": "",
        "standalone": False,
        "max_restarts": 0,
        "monitor_interval": 0.1,
        "start_method": "spawn",
        "event_log_handler": "null",
        "role": "default",
        "module": False,
        "no_python": False,
        "run_path": False,
        "log_dir": None,
        "redirects": "0",
        "tee": "0",
        "local_ranks_filter": "",
        "duplicate_stdout_filters": "",
        "duplicate_stderr_filters": "",
        "node_rank": 0,
        "master_addr": None,
        "master_port": None,
        "local_addr": None,
        "logs_specs": None,
        "numa_binding": None,
        "signals_to_handle": "SIGTERM,SIGINT",
        "shutdown_timeout": 30.0,
        "virtual_local_rank": False,
    }
    raw.update(changes)
    return raw


def test_explicit_flags_win_over_slurm() -> None:
    config = build_config(_raw(nproc_per_node="2"), SLURM, explicit=frozenset({"nproc_per_node"}))
    assert config.nnodes == (4, 4) and config.node_rank == 2 and config.master_addr == "gpu-01"
    assert config.nproc_per_node == 2  # the flag, not SLURM's 8
    assert "nproc_per_node=8 (SLURM_GPUS_ON_NODE)" not in config.origins
    assert "node_rank=2 (SLURM_NODEID)" in config.origins
    # without the CLI's knowledge of what was explicit, SLURM is not consulted
    assert build_config(_raw(), SLURM).nnodes == (1, 1)


def test_one_node_asked_for_inside_a_multi_node_allocation() -> None:
    explicit_one = build_config(_raw(nnodes="1"), SLURM, explicit=frozenset({"nnodes"}))
    assert explicit_one.nnodes == (1, 1) and explicit_one.node_rank == 0  # not SLURM_NODEID
    assert explicit_one.master_addr is None and explicit_one.nproc_per_node == 8
    standalone = build_config(_raw(standalone=True), SLURM, explicit=frozenset({"standalone"}))
    assert standalone.nnodes == (1, 1) and standalone.node_rank == 0
    assert standalone.origins == ("nproc_per_node=8 (SLURM_GPUS_ON_NODE)",)


def test_rank_assignment_is_torchruns() -> None:
    assert assign(0, (2, 4, 3)) == (0, 9)
    assert assign(2, (2, 4, 3)) == (6, 9)  # the lower nodes' local world sizes summed


def test_fact_mismatches_name_values_and_nodes() -> None:
    same = {"torch": "2.13.0", "cuda": "12.8", "nccl": "2.27.3", "driver": "580", "gpus": 8}
    assert fact_mismatches([{**same, "host": "a"}, {**same, "host": "b"}]) == []
    problems = fact_mismatches(
        [{**same, "host": "a"}, {**same, "host": "b", "nccl": "2.21.5"}, {**same, "host": "c"}]
    )
    assert problems == [
        "NCCL differs between nodes: 2.27.3 on node 0 (a), node 2 (c); 2.21.5 on node 1 (b)"
    ]


def _summary(node: int, status: str, root: NodeSummary | None = None, code: int = 0) -> NodeSummary:
    """A node's summary as the verdict reads it; `root`: a _root() for its root cause."""
    if root is None:
        return NodeSummary(
            node=node, host=f"h{node}", status=status, code=code, root_rank=None,
            ending=None, consequence=False,
        )  # fmt: skip
    return replace(root, node=node, host=f"h{node}", status=status, code=code)


def _root(rank: int, consequence: bool = False) -> NodeSummary:
    line = f"rank {rank} exited with code 3 (unknown): ValueError: x at t.py:1 in f"
    return NodeSummary(
        node=0, host="", status="failed", code=0, root_rank=rank, ending=line,
        consequence=consequence,
    )  # fmt: skip


def test_the_job_verdict_prefers_a_real_cause_and_the_first_announcer() -> None:
    summaries = [
        _summary(0, "failed", _root(1, consequence=True), code=1),
        _summary(1, "failed", _root(3), code=3),
    ]
    job = conclude_job(summaries, ["h0", "h1"], stops.rank_failed(1, 0, 3, 3), lost_after=15)
    assert job.status == "failed" and job.code == 3 and job.root_node == 1 and job.retryable
    assert job.lines[0].startswith("FAILED on node 1 (h1): rank 3 exited with code 3")


def test_a_lost_node_ends_the_job_without_a_restart() -> None:
    job = conclude_job(
        [_summary(0, "failed", _root(0, consequence=True), code=1), None],
        ["h0", "h1"],
        None,
        lost_after=3,
    )
    assert job.code == 69 and job.lost == (1,) and not job.retryable and job.root_node == 1
    assert job.lines[0].startswith("node 1 (h1) was lost: its launcher gave no sign of life for")
    assert job.lines[1].startswith("node 0 (h0), as a consequence: rank 0 exited with code 3")
    # a real failure elsewhere still leads, and the run still ends with 69
    real = conclude_job(
        [_summary(0, "failed", _root(0), code=3), None], ["h0", "h1"], None, lost_after=3
    )
    assert real.lines[0].startswith("FAILED on node 0 (h0)") and real.code == 69


def test_success_and_interrupts_across_nodes() -> None:
    ok = conclude_job([_summary(0, "succeeded"), _summary(1, "succeeded")], ["a", "b"], None, 1)
    assert ok.status == "succeeded" and ok.code == 0 and not ok.lines
    stopped = conclude_job(
        [_summary(0, "interrupted", code=143), _summary(1, "failed")], ["a", "b"], None, 1
    )
    assert stopped.status == "interrupted" and stopped.code == 143 and not stopped.retryable


def test_sbatch_examples_are_valid_bash_and_name_real_files() -> None:
    import subprocess
    from pathlib import Path

    root = Path(__file__).parents[1]
    scripts = sorted((root / "scripts" / "slurm").glob("*.sbatch"))
    assert len(scripts) == 2
    for script in scripts:
        subprocess.run(["bash", "-n", str(script)], check=True)
        text = script.read_text()
        assert "srun safelaunch" in text or "srun --kill-on-bad-exit=1 --wait=0 safelaunch" in text
        if "--kill-on-bad-exit" in text:  # a node done first (exit 0) never ends a late one
            assert "--wait=0" in text
        assert (root / "scripts" / "train_toy_ddp.py").is_file()
        assert "#SBATCH --ntasks-per-node=1" in text  # one safelaunch per node


def test_a_hang_elsewhere_outranks_the_consequences_it_caused() -> None:
    hung = replace(
        _summary(1, "hung", code=124),
        culprits=(3,),
        hang_reason="it is behind: collective #7 vs #8",
    )
    job = conclude_job(
        [_summary(0, "failed", _root(0, consequence=True), code=134), hung],
        ["h0", "h1"],
        stops.hang(1, 0, 3),
        lost_after=3,
    )
    assert job.status == "hung" and job.code == 124 and job.root_node == 1
    assert job.lines[0].startswith("HUNG on node 1 (h1): likely culprit rank 3")
    assert job.lines[1].startswith("node 0 (h0), as a consequence: rank 0")


def test_an_srun_step_on_part_of_the_allocation_takes_the_steps_values() -> None:
    """`srun -N1 -r1` inside a two-node job (values as SLURM 22.05 sets them)."""
    step = {
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NUM_NODES": "4",
        "SLURM_JOB_NODELIST": "gpu-[01-04]",
        "SLURM_NODELIST": "gpu-[01-04]",  # SLURM leaves the job's list here
        "SLURM_NNODES": "2",
        "SLURM_STEP_ID": "3",
        "SLURM_STEP_NUM_NODES": "2",
        "SLURM_STEP_NODELIST": "gpu-[03-04]",
        "SLURM_NODEID": "1",  # relative to the step
        "SLURMD_NODENAME": "gpu-04",
    }
    found = slurm_defaults(step)
    assert found["nnodes"] == ("2", "SLURM_STEP_NUM_NODES")
    assert found["node_rank"] == (1, "SLURM_NODEID")
    assert found["master_addr"] == ("gpu-03", "first host of SLURM_STEP_NODELIST")
    assert slurm_defaults({**step, "SLURM_STEP_NUM_NODES": "1"})["nnodes"] == (
        "1",
        "SLURM_STEP_NUM_NODES",
    )
    assert node_name(step) == "gpu-04" and node_name({"SLURMD_NODENAME": "x"}) is None
    assert in_step(step) and not in_step({**step, "SLURM_STEP_ID": ""})  # the batch script


class _Store:
    """An in-memory stand-in for the rendezvous store (the real one: test_multinode.py)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.data[key]

    def add(self, key: str, amount: int) -> int:
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def wait(self, keys: list[str], seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not self.check(keys) and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.check(keys)

    def clone(self) -> _Store:  # the beat's own connection
        return self


def _member(store: _Store, node: int, lost_after: float, beat_every: float) -> Membership:
    """Node `node` of two, one rank each, over `store`."""
    place = Placement(
        node=node, nodes=2, base_rank=node, world_size=2, master_addr="a", master_port=1,
        run_id="r", hosts=("a", "b"), nprocs=(1, 1),
    )  # fmt: skip
    joined = Joined(node=node, nodes=2, master_addr="a", master_port=1, shutdown=lambda: None)
    return Membership(store, joined, place, lost_after=lost_after, beat_every=beat_every)


class _Patient:
    def __init__(self) -> None:
        self.told: list[list[int]] = []

    def poll(self, missing: list[int], waited: float) -> bool:
        self.told.append(missing)
        return False


def test_a_finished_node_waits_for_a_live_node_past_any_fixed_grace() -> None:
    """Node 1 finished; node 0's launcher keeps beating and reports after 1.5 s: its verdict
    counts, although the fixed grace (here 0.3 s) ran out long before."""
    store = _Store()
    membership = _member(store, 1, lost_after=0.3, beat_every=0.05)
    membership.start_beating()
    late_node = threading.Event()

    def node0() -> None:  # alive, busy, then done
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            store.add("alive/0", 1)
            time.sleep(0.05)
        store.set("attempt/0/end/0", '{"node": 0, "status": "succeeded"}')
        late_node.set()

    threading.Thread(target=node0, daemon=True).start()
    waiting = _Patient()
    summaries = membership.end_attempt(0, {"node": 1, "status": "succeeded"}, 0.3, waiting)
    assert late_node.is_set() and summaries[0] == {"node": 0, "status": "succeeded"}
    assert waiting.told and waiting.told[0] == [0]
    membership.stop_beating()


def test_a_node_that_node_0_published_as_lost_stops_its_own_ranks() -> None:
    """Its launcher was starved past the bound, and the others stop their ranks: it stops
    its own, saying why, rather than wait on peers that are gone (liveness.py)."""
    from safelaunch.rendezvous.nodewatch import NodeWatch

    store = _Store()
    membership = _member(store, 1, lost_after=0.3, beat_every=0.05)
    watch = NodeWatch(membership, attempt=0, every=0)
    assert watch.poll() is None and not membership.given_up()
    store.set("lost", "[1]")
    stop = watch.poll()
    assert stop is not None and stop.kind is stops.StopKind.NODES_LOST and stop.node is None
    assert stop.text.startswith("node 0 (a) took this node for lost: its launcher's beats")
    store.set("lost", "[]")
    assert watch.poll() is None  # node 0 saw it beat again


def test_a_node_that_stops_beating_is_not_waited_for() -> None:
    store = _Store()
    membership = _member(store, 1, lost_after=0.3, beat_every=0.05)
    membership.start_beating()
    started = time.monotonic()
    summaries = membership.end_attempt(0, {"node": 1}, 60, _Patient())
    assert summaries[0] is None and time.monotonic() - started < 5
    membership.stop_beating()


@pytest.mark.parametrize(
    ("changes", "target"),
    [
        ({"node_rank": 0, "master_port": 29511}, None),  # node 0 serves the store itself
        ({"node_rank": 1, "master_port": 29511}, ("127.0.0.1", 29511, "join_timeout (600 s)")),
        ({"rdzv_backend": "c10d", "rdzv_endpoint": "127.0.0.1:29400"}, None),  # this machine
        ({"rdzv_backend": "c10d", "rdzv_endpoint": "localhost"}, None),
        (
            {"rdzv_backend": "c10d", "rdzv_endpoint": "127.0.0.1:29400", "rdzv_conf": "is_host=0"},
            ("127.0.0.1", 29400, "read_timeout (60 s)"),
        ),
    ],
)
def test_only_a_node_that_does_not_host_the_store_probes_it(
    changes: dict[str, object], target: tuple[str, int, str] | None
) -> None:
    raw = _raw(nnodes="2", master_addr="127.0.0.1", **changes)
    assert probe_target(build_config(raw, {})) == target


@pytest.mark.parametrize(
    ("stop", "shown"),
    [
        (stops.rank_failed(1, 2, 3, -15), "node 1: rank 3 failed (returncode -15)"),
        (stops.interrupted(0, 0, 2), "node 0: interrupted by SIGINT"),
        (stops.hang(2, 1, 3.0), "node 2: hang: no progress for 3 s"),
    ],
)
def test_a_stop_travels_as_a_record_and_reads_as_before(stop: stops.NodeStop, shown: str) -> None:
    """The announcement is JSON with its fields; the words are rendered, never parsed."""
    store = _Store()
    membership = _member(store, 0, lost_after=3, beat_every=1)
    assert membership.first_stop(stop.attempt) is None
    membership.announce_stop(stop.attempt, stop)
    membership.announce_stop(stop.attempt, stops.hang(0, stop.attempt, 9))  # the first one wins
    assert json.loads(store.data[f"attempt/{stop.attempt}/stop"])["kind"] == stop.kind.value
    assert membership.first_stop(stop.attempt) == stop
    assert stop.shown == shown == str(stop)
    with pytest.raises(ValueError, match="not a stop announcement"):
        stops.from_json("node 1: rank 3 failed (returncode 1)")  # the old prose is not read


_CAUSE = _root(3)
_FOLLOWED = _root(1, consequence=True)
_HUNG = replace(_summary(1, "hung", code=124), culprits=(3,), hang_reason="behind")


@pytest.mark.parametrize(
    ("nodes", "stop", "status", "code", "root_node", "first_line"),
    [
        # the first announcer's real failure is the cause ...
        ([("failed", _CAUSE, 1), ("failed", _CAUSE, 3)], stops.rank_failed(1, 0, 3, 3),
         "failed", 3, 1, "FAILED on node 1 (h1): rank 3"),
        ([("failed", _CAUSE, 1), ("failed", _CAUSE, 3)], stops.rank_failed(0, 0, 3, 1),
         "failed", 1, 0, "FAILED on node 0 (h0): rank 3"),
        # ... but a consequence never is while a real failure exists, whoever announced
        ([("failed", _FOLLOWED, 1), ("failed", _CAUSE, 3)], stops.rank_failed(0, 0, 1, 1),
         "failed", 3, 1, "FAILED on node 1 (h1): rank 3"),
        # only consequences: the earliest (the first announcer), else the first node
        ([("failed", _FOLLOWED, 1), ("failed", _FOLLOWED, 2)], stops.rank_failed(1, 0, 1, 2),
         "failed", 2, 1, "FAILED on node 1 (h1): rank 1"),
        ([("failed", _FOLLOWED, 1), ("failed", _FOLLOWED, 2)], None,
         "failed", 1, 0, "FAILED on node 0 (h0): rank 1"),
        # a node safelaunch stopped (no root cause of its own) is never the cause
        ([("failed", None, 1), ("failed", _CAUSE, 3)], stops.rank_failed(0, 0, 3, 3),
         "failed", 3, 1, "FAILED on node 1 (h1): rank 3"),
        # a hang outranks the consequences it caused, listed after it
        ([("failed", _FOLLOWED, 134), "hung"], stops.hang(1, 0, 3),
         "hung", 124, 1, "HUNG on node 1 (h1): likely culprit rank 3: behind"),
        # stopped by another node, nothing failed here: the announcement is the reason
        ([("failed", None, 1), ("succeeded", None, 0)], stops.interrupted(1, 0, 15),
         "failed", 69, None, "stopped: node 1: interrupted by SIGTERM"),
        ([("interrupted", None, 130), ("failed", _CAUSE, 3)], stops.interrupted(0, 0, 2),
         "interrupted", 130, None, "INTERRUPTED on node 0 (h0)"),
        ([("succeeded", None, 0), ("succeeded", None, 0)], None, "succeeded", 0, None, None),
    ],
)  # fmt: skip
def test_the_job_verdict_on_structured_stops(
    nodes: list, stop: stops.NodeStop | None, status: str, code: int,
    root_node: int | None, first_line: str | None,
) -> None:  # fmt: skip
    summaries = [
        _HUNG if spec == "hung" else _summary(node, *spec) for node, spec in enumerate(nodes)
    ]
    job = conclude_job(summaries, ["h0", "h1"], stop, lost_after=3)
    assert (job.status, job.code, job.root_node) == (status, code, root_node)
    if first_line is None:
        assert not job.lines
    else:
        assert job.lines[0].startswith(first_line), job.lines
    if status == "hung":
        assert job.lines[1].startswith("node 0 (h0), as a consequence: rank 1")


@pytest.mark.parametrize("stopped_by_peer", [False, True])
def test_a_node_summary_is_its_report_json_projected(tmp_path, stopped_by_peer: bool) -> None:
    """One encoding: what a node tells the others is what its report.json says."""
    log = tmp_path / "rank3.log"
    log.write_text(
        'Traceback (most recent call last):\n  File "t.py", line 1, in f\n'
        "ValueError: rank 3 broke\n"
    )
    plan = LaunchPlan(
        run=RunIdentity(
            run_id="r", run_dir=tmp_path, token="t", private_dir=tmp_path, launcher_pid=1
        ),
        attempt=0, attempt_dir=tmp_path, workers=(), split_streams=False,
        duplicate_filters={}, shutdown_timeout=30, monitor_interval=0.1, color=False,
        env_choices=(), heartbeat_dir=tmp_path, hang_timeout=300.0, heartbeat_interval=2.0,
    )  # fmt: skip

    def ended(rank: int, code: int, at: float) -> RankExit:
        return RankExit(
            rank=rank, local_rank=rank - 2, pid=None, returncode=code, ended_after=at,
            log_path=log if rank == 3 else tmp_path / "none.log",
            error_file=tmp_path / "none.json",
        )  # fmt: skip

    peer = stops.rank_failed(0, 0, 1, 1)
    rank3 = ended(3, -15, 2.0) if stopped_by_peer else ended(3, 1, 1.0)
    record = AttemptRecord(
        plan=plan,
        exits=(ended(2, -15, 2.0), rank3),
        teardown_after=1.5 if not stopped_by_peer else 0.5,
        teardown_cause=TeardownCause.PEER if stopped_by_peer else TeardownCause.RANK_FAILED,
        interrupt_signal=None, hang=None, strays_ended=0, log_problems=(), duration=2.0,
        peer_event=peer if stopped_by_peer else None,
    )  # fmt: skip
    outcome = outcome_of(record)
    diagnosis = diagnose(outcome)
    report = report_record(outcome, diagnosis, "r", 0)
    sent = json.loads(json.dumps(node_summary(report, outcome, diagnosis, 1, "h1")))
    place = Placement(
        node=1, nodes=2, base_rank=2, world_size=4, master_addr="a", master_port=1,
        run_id="r", hosts=("h0", "h1"), nprocs=(2, 2),
    )  # fmt: skip
    summary = read_summary(sent)
    assert summary is not None
    job = conclude_job([None, summary], place.hosts, peer, lost_after=3)
    report["job"] = job_record(place, job)
    written = json.loads(json.dumps(report))  # as report.json holds it

    node_only = {"node", "host", "ending", "consequence", "evidence"}  # evidence: jobwide.py
    assert {k: v for k, v in sent.items() if k not in node_only} == project(written)
    assert (sent["node"], sent["host"]) == (written["job"]["node"], written["job"]["hosts"][1])

    def within(part: object, whole: object) -> bool:  # a projection: nothing added or changed
        if isinstance(part, dict) and isinstance(whole, dict):
            return all(k in whole and within(v, whole[k]) for k, v in part.items())
        return part == whole

    assert within(project(written), written)
    if stopped_by_peer:
        assert sent["stopped_by_node"] == "node 0: rank 1 failed (returncode 1)"
        assert summary.root_rank is None and sent["ending"] is None
    else:
        assert summary.root_rank == 3 and written["diagnosis"]["root_cause_rank"] == 3
        assert sent["ending"].startswith("rank 3 exited with code 1") and not sent["consequence"]


def test_a_nodes_ambiguous_evidence_stays_ambiguous_across_the_store() -> None:
    """ "One of these ranks" shipped to the other nodes still names nobody there."""
    import json

    from safelaunch.diagnose.arbiter import Item, Source, Tier, decide
    from safelaunch.diagnose.jobwide import pack, unpack

    tie = Item(source=Source.CALL_LEDGER, tier=Tier.BEHIND, ranks=(2, 3), says="differ",
               ambiguous=True)  # fmt: skip
    first = Item(source=Source.FIRST_FAILURE, tier=Tier.FIRST_FAILURE, ranks=(3,), says="f")
    shipped = unpack(1, "h1", json.loads(json.dumps(pack([], decide([tie, first])))))
    assert shipped is not None and [i.ambiguous for i in shipped.items] == [True, False]
    assert decide(shipped.items).culprits == ()


def test_torchs_rendezvous_runs_on_a_fresh_thread_with_its_result_or_error() -> None:
    """torch names each rendezvous step with inspect.stack(): a shallow stack keeps that
    cheap under `python -m` (torchstore.on_fresh_thread); what it returns or raises comes
    back to the caller."""
    from safelaunch.rendezvous.torchstore import on_fresh_thread

    caller = threading.current_thread()
    assert on_fresh_thread(lambda: threading.current_thread() is not caller)

    def fails() -> None:
        raise TimeoutError("no quorum")

    with pytest.raises(TimeoutError, match="no quorum"):
        on_fresh_thread(fails)


def test_the_launcher_works_while_torchs_rendezvous_waits() -> None:
    """`meanwhile` runs on the calling thread while the rendezvous thread still waits (it
    waits for what `meanwhile` does): a launch loads its attempt's modules there."""
    from safelaunch.rendezvous.torchstore import on_fresh_thread

    done = threading.Event()
    caller = threading.current_thread()
    where: list[bool] = []

    def rendezvous() -> bool:
        return done.wait(30)  # the other nodes, which come once `meanwhile` ran

    def meanwhile() -> None:
        where.append(threading.current_thread() is caller)
        done.set()

    assert on_fresh_thread(rendezvous, meanwhile)
    assert where == [True]
