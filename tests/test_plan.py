"""The per-rank environment: torchrun's variables, built once, the user's settings kept."""

from __future__ import annotations

import sys
from pathlib import Path
from types import MappingProxyType

import pytest

from safelaunch.config import LaunchConfig, StreamSelection
from safelaunch.plan import TOKEN_VAR, RunIdentity, build_plan
from safelaunch.preflight import PreflightReport
from safelaunch.preflight.ports import PortReservation
from safelaunch.rank.names import BOOTSTRAP_CODE as CODE
from safelaunch.rendezvous import Placement

TORCHRUN_VARS = {
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "LOCAL_WORLD_SIZE",
    "WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_SIGNALS_TO_HANDLE",
    "OMP_NUM_THREADS",
}


def _plan(
    nproc: int = 2, attempt: int = 0, placement: Placement | None = None, **overrides: object
):
    environ = overrides.pop("environ", {"PATH": "/bin"})
    config = LaunchConfig(
        training_script="train.py",
        training_script_args=("--lr", "1"),
        environ=MappingProxyType(dict(environ)),
        **overrides,
    )
    report = PreflightReport(
        nproc=nproc,
        nproc_reason="test",
        master_addr="localhost",
        master_port=PortReservation(29511, None),
    )
    run = RunIdentity(
        run_id="r1", run_dir=Path("/logs/r1"), token="t0k", private_dir=Path("/p"), launcher_pid=1
    )
    return build_plan(config, report, run, attempt, placement=placement)


def test_every_torchrun_variable_per_rank() -> None:
    plan = _plan(nproc=3, attempt=2, max_restarts=4)
    for local_rank, worker in enumerate(plan.workers):
        env = worker.env
        assert set(env) >= TORCHRUN_VARS
        assert env["RANK"] == env["LOCAL_RANK"] == env["ROLE_RANK"] == str(local_rank)
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == (
            "3",
            "3",
            "1",
        )
        assert env["TORCHELASTIC_RESTART_COUNT"] == "2"
        assert env["TORCHELASTIC_MAX_RESTARTS"] == "4"
        assert env["MASTER_PORT"] == "29511"
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "False"
        assert env["TORCHELASTIC_ERROR_FILE"] == f"/logs/r1/attempt_2/rank{local_rank}.error.json"
        assert env[TOKEN_VAR] == "t0k"
        assert worker.argv == (sys.executable, "-u", "-c", CODE, "script", "train.py", "--lr", "1")
        assert worker.bootstrapped
        assert env["SAFELAUNCH_HEARTBEAT_DIR"] == "/p/attempt_2"
        assert env["SAFELAUNCH_STACKS_FILE"] == f"/p/attempt_2/rank{local_rank}.stacks"
        assert worker.log_path == Path(f"/logs/r1/attempt_2/rank{local_rank}.log")


def test_an_elastic_attempt_that_admitted_nodes_keeps_torchruns_restart_count() -> None:
    """Attempt 3 after one restart and one admission: the workers see 1, in attempt_3."""
    place = Placement(
        node=1, nodes=3, base_rank=2, world_size=6, master_addr="m", master_port=7,
        run_id="none", hosts=("a", "b", "c"), nprocs=(2, 2, 2), restart_count=1,
    )  # fmt: skip
    plan = _plan(nproc=2, attempt=3, placement=place, max_restarts=3)
    env = plan.workers[1].env
    assert (env["TORCHELASTIC_RESTART_COUNT"], env["RANK"], env["GROUP_RANK"]) == ("1", "3", "1")
    assert (env["WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == ("6", "3")
    assert env["TORCHELASTIC_ERROR_FILE"] == "/logs/r1/attempt_3/rank3.error.json"


def test_environment_is_frozen() -> None:
    with pytest.raises(TypeError):
        _plan().workers[0].env["RANK"] = "9"  # type: ignore[index]


def test_users_settings_win_and_our_choices_are_listed() -> None:
    plan = _plan(
        environ={"OMP_NUM_THREADS": "8", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"},
        debug_profile="quiet",
    )
    env = plan.workers[0].env
    assert env["OMP_NUM_THREADS"] == "8" and env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert [c.name for c in plan.env_choices] == ["PYTHONUNBUFFERED"]
    plan = _plan(nproc=1)
    assert "OMP_NUM_THREADS" not in plan.workers[0].env  # torchrun sets it only for nproc > 1


def test_virtual_local_rank_narrows_cuda_visible_devices() -> None:
    plan = _plan(nproc=2, virtual_local_rank=True, environ={"CUDA_VISIBLE_DEVICES": "4, 6"})
    assert [(w.env["LOCAL_RANK"], w.env["CUDA_VISIBLE_DEVICES"]) for w in plan.workers] == [
        ("0", "4"),
        ("0", "6"),
    ]
    plan = _plan(nproc=2, virtual_local_rank=True)
    assert [w.env["CUDA_VISIBLE_DEVICES"] for w in plan.workers] == ["0", "1"]


def test_rdzv_id_names_the_run() -> None:
    assert _plan(rdzv_id="job42").workers[0].env["TORCHELASTIC_RUN_ID"] == "job42"
    assert _plan().workers[0].env["TORCHELASTIC_RUN_ID"] == "r1"


def test_one_pipe_unless_streams_must_be_told_apart() -> None:
    assert not _plan().split_streams
    assert not _plan(redirects=StreamSelection(default=3)).split_streams
    assert _plan(redirects=StreamSelection(default=1)).split_streams
    assert _plan(duplicate_stderr_filters=("x",)).split_streams


def test_debug_profiles_per_rank_files_and_the_users_values_win() -> None:
    plan = _plan(nproc=2, attempt=1, environ={"NCCL_DEBUG": "WARN", "MINE": "x{rank}"})
    for rank, worker in enumerate(plan.workers):
        env = worker.env
        assert env["NCCL_DEBUG"] == "WARN"  # the user's own value
        assert env["NCCL_DEBUG_FILE"] == f"/logs/r1/attempt_1/nccl-rank{rank}.%h.%p.log"
        assert env["TORCH_FR_DUMP_TEMP_FILE"] == "/logs/r1/attempt_1/flight-rank"
        assert env["MINE"] == "x{rank}"  # placeholders only in safelaunch's own values
        assert "TORCH_DISTRIBUTED_DEBUG" not in env
    assert "NCCL_DEBUG" not in {c.name for c in plan.env_choices}
    full = _plan(debug_profile="full").workers[0].env
    assert full["TORCH_DISTRIBUTED_DEBUG"] == "INFO"  # never DETAIL: it crashes DDP in 2.13
    assert full["NCCL_DEBUG_SUBSYS"] == "ALL" and full["CUDA_LAUNCH_BLOCKING"] == "1"
    quiet = _plan(debug_profile="quiet").workers[0].env
    assert not {"NCCL_DEBUG", "NCCL_DEBUG_FILE", "TORCH_FR_BUFFER_SIZE"} & set(quiet)
