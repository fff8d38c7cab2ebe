"""The isolation rules without running a job: backend mapping, decisions, time box, ledgers."""

from __future__ import annotations

import os
from pathlib import Path

import builders
import pytest

from safelaunch.hangs.detection import passed_point
from safelaunch.isolation.evidence import (
    CommUse,
    collective_lag,
    collective_mismatch,
    read_comm,
    read_ledgers,
)
from safelaunch.isolation.reruns import gloo_rerun, transport_reruns
from safelaunch.plan import Timebox
from safelaunch.rank.dist_hooks import describe, gloo_backend
from safelaunch.rundir.heartbeat_file import Beat


@pytest.mark.parametrize(
    ("backend", "has_cuda", "expected"),
    [
        ("nccl", True, "cuda:gloo"),  # keeps NCCL's "CUDA tensors only"
        ("NCCL", True, "cuda:gloo"),
        ("nccl", False, "gloo"),  # no CUDA tensors to guard: the CPU tensors must run
        (None, True, "cpu:gloo,cuda:gloo"),
        (None, False, "gloo"),
        ("gloo", True, "gloo"),
        ("cpu:gloo,cuda:nccl", True, "cpu:gloo,cuda:gloo"),
        ("cpu:gloo, cuda:nccl", False, "cpu:gloo,cuda:gloo"),
        ("mpi", True, "mpi"),  # not NCCL: left alone
    ],
)
def test_gloo_backend_maps_nccl_per_device(
    backend: str | None, has_cuda: bool, expected: str
) -> None:
    assert gloo_backend(backend, has_cuda) == expected


def test_describe_names_dtype_and_shape() -> None:
    class Tensor:
        shape = (4, 5)
        dtype = "torch.float32"

    assert describe(Tensor()) == "float32[4, 5]"
    assert describe([Tensor(), Tensor()]) == "list of 2 x float32[4, 5]"
    assert describe(None) == "NoneType"


def _beat(step: int | None = None, seq: int | None = None) -> Beat:
    return builders.beat(step=step, seq=seq)


def test_time_box_by_step_needs_every_rank_clearly_past() -> None:
    box = Timebox(past_step=10, past_seq=None, after_s=None, cap_s=60)
    assert passed_point(box, [_beat(step=12), _beat(step=11)], 5) is None  # 11 may be the point+1
    assert passed_point(box, [_beat(step=12), None], 5) is None  # a rank not yet reporting
    assert "past step 10" in (passed_point(box, [_beat(step=12), _beat(step=12)], 5) or "")


def test_time_box_by_collective_count_and_by_time() -> None:
    box = Timebox(past_step=None, past_seq=40, after_s=None, cap_s=60)
    assert passed_point(box, [_beat(seq=41)], 1) is None
    assert "collective #40" in (passed_point(box, [_beat(seq=42)], 1) or "")
    timed = Timebox(past_step=None, past_seq=None, after_s=9.0, cap_s=60)
    assert passed_point(timed, [None], 8.9) is None
    assert "ran 9 s without failing" in (passed_point(timed, [None], 9.0) or "")


def _ledger(directory: Path, rank: int, *calls: str) -> None:
    lines = "".join(f"{n}\t{call}\n" for n, call in enumerate(calls, 1))
    (directory / f"rank{rank}.collectives.log").write_text(lines)


def test_ledgers_name_the_first_differing_collective(tmp_path: Path) -> None:
    _ledger(tmp_path, 0, "all_reduce\tfloat32[4]", "all_reduce\tfloat32[8]")
    _ledger(tmp_path, 1, "all_reduce\tfloat32[4]", "all_reduce\tfloat32[9]")
    _ledger(tmp_path, 2, "all_reduce\tfloat32[4]", "all_reduce\tfloat32[8]")
    assert collective_mismatch(read_ledgers(tmp_path)) == (
        "collective #2 differs: ranks 0,2 called all_reduce(float32[8]); "
        "rank 1 called all_reduce(float32[9])"
    )


def test_ledgers_count_the_collectives_of_each_rank(tmp_path: Path) -> None:
    _ledger(tmp_path, 0, "all_reduce\tfloat32[4]", "all_reduce\tfloat32[4]")
    _ledger(tmp_path, 1, "all_reduce\tfloat32[4]")
    assert collective_mismatch(read_ledgers(tmp_path)) is None  # fewer is not different
    assert collective_lag(read_ledgers(tmp_path)) == (
        "collectives called from Python: rank 1 called 1; rank 0 called 2"
    )


def test_all_to_all_sizes_may_differ(tmp_path: Path) -> None:
    _ledger(tmp_path, 0, "all_to_all_single\tfloat32[3]")
    _ledger(tmp_path, 1, "all_to_all_single\tfloat32[5]")
    assert collective_mismatch(read_ledgers(tmp_path)) is None


def test_comm_records_tell_nccl_use(tmp_path: Path) -> None:
    (tmp_path / "rank0.comm.json").write_text(
        '{"requested": null, "used": "cpu:gloo,cuda:nccl", "swapped": false}'
    )
    (tmp_path / "rank1.comm.json").write_text("not json")
    comm = read_comm(tmp_path)
    assert comm.nccl and not comm.swapped
    assert not read_comm(tmp_path / "absent").nccl


@pytest.mark.parametrize(
    ("used", "ddp", "environ", "why"),
    [
        ("nccl", False, {}, "to tell where the fault is"),
        (
            "gloo",
            False,
            {},
            "with TORCH_DISTRIBUTED_DEBUG=DETAIL to name the collective that differs "
            "(the job used Gloo already)",
        ),
        ("gloo", True, {}, "again, as asked (the job used Gloo already)"),
        (
            "gloo",
            False,
            {"TORCH_DISTRIBUTED_DEBUG": "OFF"},
            "again with your TORCH_DISTRIBUTED_DEBUG (the job used Gloo already)",
        ),
    ],
)
def test_a_gloo_rerun_of_a_gloo_job_says_what_it_is_for(
    used: str, ddp: bool, environ: dict[str, str], why: str
) -> None:
    job = CommUse(requested=(used,), used=(used,), swapped=False, initialised=True, ddp=ddp)
    box = Timebox(past_step=None, past_seq=None, after_s=1, cap_s=2)
    rerun, _ = gloo_rerun(box, job, environ)
    assert rerun.purpose == "on Gloo" and rerun.why == why


def test_transport_bisection_leaves_the_users_variables_alone() -> None:
    box = Timebox(past_step=None, past_seq=None, after_s=1, cap_s=2)
    reruns, skipped = transport_reruns(box, {"NCCL_IB_DISABLE": "0"})
    assert [dict(r.env) for r in reruns] == [{"NCCL_P2P_DISABLE": "1"}, {"NCCL_SHM_DISABLE": "1"}]
    assert skipped == ["NCCL_IB_DISABLE is already set to '0': not varied"]


def test_the_ledger_records_calls_however_arguments_are_given(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    script = tmp_path / "job.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "dist.all_reduce(torch.ones(4), dist.ReduceOp.MAX)\n"  # op by position
        "dist.broadcast(src=0, tensor=torch.ones(2, 3))\n"  # keywords in another order
        "dist.all_reduce(tensor=torch.ones(5, dtype=torch.float64))\n"
        "dist.all_reduce(torch.ones(1), group=dist.new_group([0]))\n"  # a subgroup: not recorded
        "dist.barrier()\n"
        "dist.destroy_process_group()\n"
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ledger = tmp_path / "rank0.collectives.log"
    env = {
        **os.environ,
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "SAFELAUNCH_FORCE_GLOO": "1",
        "SAFELAUNCH_COLLECTIVES": str(ledger),
    }
    code = "from safelaunch.rank.bootstrap import main; main()"
    subprocess.run(
        [sys.executable, "-c", code, "script", str(script)], env=env, check=True, timeout=60
    )
    assert ledger.read_text().splitlines() == [
        "1\tall_reduce\tfloat32[4] RedOpType.MAX",
        "2\tbroadcast\tfloat32[2, 3]",
        "3\tall_reduce\tfloat64[5]",
        "4\tbarrier\t",
    ]
