"""The torch probe (a subprocess, cached) and `safelaunch doctor`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import marked_env, safelaunch_cmd

from safelaunch import exitcodes
from safelaunch.preflight import probe
from safelaunch.preflight.probe import TorchFacts, torch_findings

INVENTORIES = Path(__file__).parent / "fixtures" / "inventories"


def _levels(facts: TorchFacts, gpus: int = 0, driver: str | None = None) -> list[tuple[str, str]]:
    return [(f.level, f.code) for f in torch_findings(facts, gpus, driver)]


def test_probe_findings() -> None:
    assert _levels(TorchFacts(import_error="ModuleNotFoundError: No module named 'torch'")) == [
        ("warning", "torch-import")
    ]
    assert _levels(TorchFacts(import_error="ImportError: libcudart.so.12: cannot open")) == [
        ("error", "torch-import")
    ]
    cpu = TorchFacts(torch="2.13.0+cpu", gloo=True)
    assert _levels(cpu) == [("ok", "torch")]
    assert ("warning", "torch-cpu-build") in _levels(cpu, gpus=4)
    cu13 = TorchFacts(torch="2.13.0", cuda="13.0", cuda_available=True, device_count=1)
    assert ("error", "driver-too-old") in _levels(cu13, gpus=1, driver="12.8")
    cu128 = TorchFacts(torch="2.13.0", cuda="12.8", cuda_available=True, device_count=1)
    assert ("warning", "driver-older-minor") in _levels(cu128, gpus=1, driver="12.4")
    assert _levels(cu128, gpus=1, driver="13.0") == [("ok", "torch")]


@pytest.mark.slow
def test_real_probe_in_a_subprocess_is_cached(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(probe, "CACHE_DIR", tmp_path)
    first = probe.probe_torch()
    assert first.torch and first.torch.startswith("2.13.0") and not first.cached
    assert first.gloo and first.cuda is None and not first.nccl_available  # the CPU build here
    second = probe.probe_torch()
    assert second.cached and second.torch == first.torch


def _doctor(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    run_env, _ = marked_env(tmp_path, env)
    return subprocess.run(
        safelaunch_cmd("doctor", *args), env=run_env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_doctor_text_and_json(tmp_path: Path) -> None:
    text = _doctor(tmp_path)
    assert text.returncode == 0, text.stderr
    assert "ok      torch               torch 2.13.0" in text.stdout
    assert text.stdout.rstrip().endswith("(for 1 rank(s))")
    report = json.loads(_doctor(tmp_path, "--json").stdout)
    assert report["verdict"] in ("ok", "warning")
    assert report["torch"]["torch"].startswith("2.13.0")
    assert {f["code"] for f in report["findings"]} >= {"driver", "torch", "shm", "nofile"}


@pytest.mark.slow
def test_doctor_fails_on_a_bad_mapping_through_the_gpu_seam(tmp_path: Path) -> None:
    env = {"SAFELAUNCH_GPU_INVENTORY": str(INVENTORIES / "four_gpus.json")}
    result = _doctor(tmp_path, "--nproc-per-node=6", env=env)
    assert result.returncode == exitcodes.PREFLIGHT
    assert "local rank 4 would fail" in result.stdout
    assert "torch-cpu-build" in result.stdout  # 4 GPUs visible, a CPU build of torch
    assert "verdict: error (for 6 rank(s))" in result.stdout
