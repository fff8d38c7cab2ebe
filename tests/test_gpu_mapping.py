"""CUDA_VISIBLE_DEVICES and the rank -> GPU mapping, on recorded inventories (the GPU seam)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cli, worker
from hypothesis import given
from hypothesis import strategies as st

from safelaunch import exitcodes
from safelaunch.gpu_inventory import NO_DRIVER, Inventory, from_json, read_inventory
from safelaunch.preflight import visible_gpus
from safelaunch.preflight.mapping import plan_gpus
from safelaunch.preflight.visible import parse_visible

INVENTORIES = Path(__file__).parent / "fixtures" / "inventories"


def inventory(name: str):
    return from_json(json.loads((INVENTORIES / f"{name}.json").read_text()), name)


FOUR = inventory("four_gpus")
UUID2 = FOUR.gpus[2].uuid


@pytest.mark.parametrize(
    ("value", "physical", "stopped_at", "ignored"),
    [
        (None, [0, 1, 2, 3], None, []),
        ("", [], None, []),
        ("  ", [], None, []),
        ("2,0", [2, 0], None, []),
        (" 3 , 1 ", [3, 1], None, []),
        ("0,-1,2", [0], "-1", ["2"]),
        ("0,7,1", [0], "7", ["1"]),
        ("-1", [], "-1", []),
        (UUID2[:10], [2], None, []),
        (f"1,{UUID2}", [1, 2], None, []),
        ("GPU-", [], "GPU-", []),  # a prefix of every UUID is ambiguous
        ("GPU-ffffffff", [], "GPU-ffffffff", []),
        ("a,0", [], "a", ["0"]),
    ],
)
def test_parse_like_the_cuda_runtime(value, physical, stopped_at, ignored) -> None:
    visible = parse_visible(value, FOUR.gpus)
    assert [d.gpu.index for d in visible.devices] == physical
    assert [d.cuda_index for d in visible.devices] == list(range(len(physical)))
    assert visible.stopped_at == stopped_at
    assert list(visible.ignored) == ignored


def test_duplicates_and_mig() -> None:
    assert parse_visible("1,1", FOUR.gpus).duplicates == ("1",)
    mig = inventory("mig")
    visible = parse_visible("MIG-bbbb1111", mig.gpus)
    assert [(d.gpu.index, d.mig) for d in visible.devices] == [(0, mig.gpus[0].mig[1])]


@given(st.text(alphabet="0123456789-, GPUMIabcdef", max_size=40))
def test_any_string_parses_without_crashing(value: str) -> None:
    visible = parse_visible(value, FOUR.gpus)
    assert len(visible.devices) <= len(FOUR.gpus) + 1


def test_mapping_lines_and_a_busy_gpu() -> None:
    plan = plan_gpus(inventory("eight_gpus_one_busy"), {"CUDA_VISIBLE_DEVICES": "2,3"}, 2)
    assert plan.errors == ()
    assert plan.lines[1].startswith("local rank 1 -> cuda:1 -> GPU 3 (GPU-33a1b2c3, NVIDIA H200")
    assert plan.warnings == ("GPU 3 is in use by pid 4242 (alice: python other_job.py, 70000 MiB)",)


def test_more_ranks_than_gpus_names_the_rank_that_would_fail() -> None:
    plan = plan_gpus(FOUR, {}, 6)
    assert plan.errors[0][0] == (
        "6 ranks but 4 visible GPU(s): local rank 4 would fail with "
        "'CUDA error: invalid device ordinal'"
    )
    assert "CUDA_VISIBLE_DEVICES=" in plan.errors[0][1]


def test_truncation_duplicates_and_device_order_are_said() -> None:
    plan = plan_gpus(FOUR, {"CUDA_VISIBLE_DEVICES": "1,9,2"}, 1)
    assert (
        "CUDA stops at '9' (no such GPU); it ignores 2 after it: the ranks see 1"
        in plan.warnings[0]
    )
    assert (
        plan_gpus(FOUR, {"CUDA_VISIBLE_DEVICES": "0,0"}, 1)
        .errors[0][0]
        .startswith("CUDA_VISIBLE_DEVICES=0,0 names a GPU twice")
    )
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in plan_gpus(inventory("mixed_models"), {}, 2).warnings[0]


def test_no_driver_is_said_plainly_on_this_machine() -> None:
    found = read_inventory({})
    if found.gpus:
        pytest.skip("this machine has GPUs")
    assert found.problem and ("no NVIDIA driver" in found.problem or "NVML" in found.problem)
    assert plan_gpus(found, {}, 4).errors == ()  # a CPU job without GPUs is fine


def _launch(tmp_path: Path, inventory_name: str, *args: str, env=None):
    recorded = {"SAFELAUNCH_GPU_INVENTORY": str(INVENTORIES / f"{inventory_name}.json")}
    return cli(tmp_path, *args, worker("dump_env.py"), env={**recorded, **(env or {})})


def test_nproc_gpu_resolves_to_the_visible_gpus_and_the_mapping_is_printed(tmp_path: Path) -> None:
    result = _launch(
        tmp_path, "four_gpus", "--nproc-per-node=gpu", env={"CUDA_VISIBLE_DEVICES": "1,3,0"}
    )
    assert result.returncode == 0, result.stderr
    assert "3 rank(s) (one per visible GPU (--nproc-per-node=gpu))" in result.stderr
    assert "local rank 2 -> cuda:2 -> GPU 0 (" in result.stderr
    assert len(list((tmp_path / "pids").iterdir())) == 3


def test_too_many_ranks_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    result = _launch(tmp_path, "four_gpus", "--nproc-per-node=5")
    assert result.returncode == exitcodes.PREFLIGHT
    assert result.stderr.count("\n") == 1 and "local rank 4 would fail" in result.stderr
    assert not list((tmp_path / "pids").iterdir()) and not (tmp_path / "logs").exists()


@pytest.mark.parametrize("value", ["7", "GPU-", "GPU-ffff", "-1,0", "a"])
def test_a_value_that_hides_every_gpu_by_accident_is_an_error(value: str) -> None:
    plan = plan_gpus(FOUR, {"CUDA_VISIBLE_DEVICES": value}, 1)
    message, fix = plan.errors[0]
    assert message.startswith(f"CUDA_VISIBLE_DEVICES={value}: CUDA will see no GPU")
    assert "this machine has 4, 0-3" in message and "CUDA_VISIBLE_DEVICES= (empty)" in fix


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_value_still_hides_the_gpus_on_purpose(value: str) -> None:
    assert plan_gpus(FOUR, {"CUDA_VISIBLE_DEVICES": value}, 2).errors == ()


def test_a_hiding_typo_stops_the_launch_before_anything_starts(tmp_path: Path) -> None:
    result = _launch(
        tmp_path, "four_gpus", "--nproc-per-node=auto", env={"CUDA_VISIBLE_DEVICES": "7"}
    )
    assert result.returncode == exitcodes.PREFLIGHT
    assert "CUDA_VISIBLE_DEVICES=7: CUDA will see no GPU" in result.stderr
    assert not list((tmp_path / "pids").iterdir()) and not (tmp_path / "logs").exists()


def _banner_env(result) -> str:  # type: ignore[no-untyped-def]
    return next(line for line in result.stderr.splitlines() if "set for the ranks" in line)


def test_the_banner_leaves_ncccls_variables_out_where_no_gpu_is_visible(tmp_path: Path) -> None:
    for where in ("gpus", "none"):
        (tmp_path / where).mkdir()
    with_gpus = _launch(tmp_path / "gpus", "four_gpus", "--nproc-per-node=2")
    assert with_gpus.returncode == 0, with_gpus.stderr
    assert "NCCL_DEBUG=INFO" in _banner_env(with_gpus)
    hidden = _launch(
        tmp_path / "none", "four_gpus", "--nproc-per-node=2", env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert hidden.returncode == 0, hidden.stderr
    line = _banner_env(hidden)
    assert "NCCL" not in line.split("; and ")[0] and "OMP_NUM_THREADS=1" in line
    assert line.endswith("; and 4 NCCL variables, unused (no GPU: Gloo)"), line
    dumped = json.loads((tmp_path / "none" / "pids" / "env0.json").read_text())
    assert dumped["env"]["NCCL_DEBUG"] == "INFO"  # still set: the environment is the same


@pytest.mark.parametrize(
    ("name", "value", "count"),
    [("four_gpus", None, 4), ("four_gpus", "", 0), ("four_gpus", "2,0", 2), ("four_gpus", "7", 0)],
)
def test_visible_gpus_counts_what_the_ranks_will_see(name: str, value, count: int) -> None:  # type: ignore[no-untyped-def]
    assert visible_gpus(inventory(name), value) == count
    assert visible_gpus(Inventory(problem=NO_DRIVER), value) == 0
    assert visible_gpus(Inventory(problem="NVML unavailable: x"), value) == (
        0 if value == "" else None
    )
