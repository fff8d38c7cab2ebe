"""The GPU acceptance script on a machine without a GPU: it parses, it skips every check
in one go, and its judges read recorded outputs right (tests/fixtures/gpu_acceptance/,
recorded on CPU by record.py there: real safelaunch runs, GPUs through the inventory seam,
GPU-only errors played by Gloo workers). The GPU run itself: docs/gpu-acceptance.md.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_acceptance.sh"
FIXTURES = Path(__file__).parent / "fixtures" / "gpu_acceptance"
UUID = "GPU-5e4f3c1a-9b7d-4c2e-8f10-a1b2c3d4e5f6"


def _load_judge() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_judge", ROOT / "scripts/gpu/judge.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_judge"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


judge = _load_judge()
H200 = judge.Gpu(index=0, uuid=UUID, name="NVIDIA H200")


def recorded(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def ran(record: dict[str, Any]) -> Any:
    return judge.Ran(rc=record["rc"], output=record["output"], seconds=1.0)


def test_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_without_a_gpu_every_check_is_skipped_in_one_go(tmp_path: Path) -> None:
    env = {**os.environ, "SAFELAUNCH_ACCEPTANCE_NO_GPU": "1", "PYTHON": sys.executable}
    result = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("gpu acceptance: no GPU on this machine (")
    checks = [line for line in lines[1:-1]]
    assert len(checks) == 13 and all(line.startswith("SKIP  ") for line in checks)
    assert all(line.endswith("no GPU") for line in checks)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["counts"] == {"PASS": 0, "FAIL": 0, "SKIP": 13, "CUT": 0}
    assert summary["exit_code"] == 0
    assert (tmp_path / "out" / "summary.txt").read_text().splitlines()[-1] == lines[-1]


def test_doctor_needs_nvml_to_match_nvidia_smi_and_a_cuda_torch() -> None:
    record = recorded("doctor")  # recorded on CPU: torch is a CPU build there
    verdict = judge.judge_doctor(ran(record), [H200])
    assert verdict.status is judge.Status.FAIL and "torch probe" in verdict.detail
    report = json.loads(record["output"])
    report["torch"].update(cuda="13.0", cuda_available=True, device_count=1, nccl="2.27.5")
    report["torch"]["nccl_available"] = True
    cuda = judge.Ran(rc=0, output=json.dumps(report), seconds=1.0)
    verdict = judge.judge_doctor(cuda, [H200])
    assert verdict.status is judge.Status.PASS, verdict.detail
    assert "1 GPU(s) (NVIDIA H200, GPU-5e4f3c1a), driver 580.159.04" in verdict.detail
    noisy = judge.Ran(rc=0, output=cuda.output + "\nUserWarning: from a library\n", seconds=1.0)
    assert judge.judge_doctor(noisy, [H200]).status is judge.Status.PASS
    other = judge.Gpu(index=0, uuid="GPU-00000000-0000", name="NVIDIA H200")
    assert judge.judge_doctor(cuda, [other]).status is judge.Status.FAIL
    assert (
        judge.judge_doctor(judge.Ran(rc=1, output="boom", seconds=1.0), []).status.value == "FAIL"
    )


def test_mapping_banner_must_name_the_gpu_the_rank_really_got() -> None:
    record = ran(recorded("mapping-index"))
    assert judge.banner_lines(record.output) == [(0, 0, 0, "GPU-5e4f3c1a")]
    assert judge.judge_mapping(record, [H200]).status is judge.Status.PASS
    moved = judge.Ran(
        rc=0, output=record.output.replace('"uuid": "GPU-5e4f', '"uuid": "GPU-0000'), seconds=1.0
    )
    assert judge.judge_mapping(moved, [H200]).status is judge.Status.FAIL
    assert judge.judge_mapping(record, [H200, H200]).status is judge.Status.FAIL  # count differs
    stop = ran(recorded("mapping-stop"))
    assert judge.judge_mapping(stop, [H200], "CUDA stops at '99'").status is judge.Status.PASS
    assert judge.judge_mapping(record, [H200], "CUDA stops at '99'").status is judge.Status.FAIL


def test_more_ranks_than_gpus_is_refused_before_anything_starts() -> None:
    record = ran(recorded("refused"))
    assert judge.judge_refused(record, 2, 1).status is judge.Status.PASS
    assert judge.judge_refused(ran(recorded("mapping-index")), 2, 1).status is judge.Status.FAIL


def test_busy_gpu_warning_names_the_holder_or_the_low_free_memory() -> None:
    busy = ran(recorded("busy"))
    verdict = judge.judge_busy(busy, 4242, 0)
    assert verdict.status is judge.Status.PASS and "pid 4242 (root:" in verdict.detail
    assert judge.judge_busy(busy, 4243, 0).status is judge.Status.FAIL
    low = judge.judge_busy(ran(recorded("busy-low")), 4242, 0)
    assert low.status is judge.Status.PASS and "NVML lists no processes" in low.detail
    assert judge.judge_busy(ran(recorded("doctor")), 4242, 0).status is judge.Status.FAIL


def test_duplicate_gpu_passes_only_with_the_communication_layer_verdict() -> None:
    record = recorded("duplicate")
    expect = dict(
        signature="duplicate-gpu", klass="environment/launch", verdict="communication layer"
    )
    # On CPU the played job used Gloo, so the rerun could only say "did not reproduce";
    # on the GPU the job asks for NCCL, and Gloo passing means the communication layer.
    verdict = judge.judge_failure(ran(record), record["report"], **expect)
    assert verdict.status is judge.Status.FAIL and "'did not reproduce'" in verdict.detail
    report = copy.deepcopy(record["report"])
    report["isolation"]["reruns"][0]["verdict"] = "communication layer"
    verdict = judge.judge_failure(ran(record), report, **expect)
    assert verdict.status is judge.Status.PASS, verdict.detail
    assert "duplicate-gpu (environment/launch), Gloo rerun: communication layer" in verdict.detail


def _load_runner() -> tuple[Any, Any]:
    """scripts/gpu/acceptance.py and checks.py as the script imports them (their own
    judge module: its Status is theirs)."""
    sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
    import acceptance
    import checks

    return acceptance, checks


def test_a_check_the_budget_cuts_is_not_green(tmp_path: Path) -> None:
    acceptance, checks = _load_runner()
    # 5 s left: every check needs more, so none runs and each is CUT, and the run fails
    results = acceptance.run_checks(
        sys.executable, [checks.Gpu(index=0, uuid=UUID, name="H200")], tmp_path,
        time.monotonic() + 5, [],
    )  # fmt: skip
    assert [r.status.value for r in results] == ["CUT"] * len(checks.CHECKS)
    assert all("not run: " in r.detail for r in results) and not list(tmp_path.iterdir())
    assert acceptance.exit_code(results) == 1


def test_the_budget_fits_the_checks_and_one_device_command() -> None:
    acceptance, checks = _load_runner()
    timeouts = [timeout for _, timeout, _ in checks.CHECKS]
    assert acceptance.budget([]) >= sum(timeouts)  # no check is cut short of its timeout
    assert acceptance.budget([]) + 60 <= 600  # with a typical install: one 600 s command
    assert acceptance.budget(["doctor"]) == timeouts[0] + acceptance.OVERRUN


def test_one_gpu_mapping_checks_fail_a_launcher_that_ignores_the_variable() -> None:
    _, checks = _load_runner()
    gpu = checks.Gpu(index=0, uuid=UUID, name="NVIDIA H200")
    two = [gpu, checks.Gpu(index=1, uuid="GPU-2", name="NVIDIA H200")]
    for variant in ("index", "uuid"):  # several GPUs: the last one, not cuda:0's default
        (only,) = checks.selections(variant, two)
        assert only.expected == (two[1],)
    honest = {  # what safelaunch did (recorded): refused a selection of no GPU, mapped GPU 0
        None: ran(recorded("mapping-index")),
        "1": ran(recorded("mapping-hidden")),
        UUID[:-1] + "0": ran(recorded("mapping-no-uuid")),
        UUID: ran(recorded("mapping-index")),
    }
    ignoring = ran(recorded("mapping-index"))  # it starts the rank on GPU 0 whatever is set
    for variant in ("index", "uuid"):
        steps = checks.selections(variant, [gpu])
        assert any(step.expected is None for step in steps), steps  # one must be refused

        def verdict(output: Any, steps: Any = steps) -> Any:
            return checks.all_of(
                [
                    checks.judge_hidden(output(s), str(s.visible))
                    if s.expected is None
                    else checks.judge_mapping(output(s), list(s.expected), s.note)
                    for s in steps
                ]
            )

        assert verdict(lambda s: honest[s.visible]).status.value == "PASS"
        assert verdict(lambda s: ignoring).status.value == "FAIL"


def test_cuda_oom_check_fails_when_a_gloo_rerun_ran(tmp_path: Path) -> None:
    _, checks = _load_runner()
    record = recorded("oom")
    report = copy.deepcopy(record["report"])
    report["isolation"]["gloo_rerun"] = True
    run_dir = tmp_path / "run"
    (run_dir / "attempt_0").mkdir(parents=True)
    (run_dir / "attempt_0" / "report.json").write_text(json.dumps(report))

    class Recorded(checks.Context):  # the launch as it ran, with a rerun in its report
        def launch(self, *args: Any, **kwargs: Any) -> Any:
            return checks.Ran(rc=record["rc"], output=record["output"], seconds=1.0), run_dir

    ctx = Recorded(python=sys.executable, gpus=(), work=tmp_path, deadline=time.monotonic() + 9)
    verdict, _ = checks.cuda_oom(ctx)
    assert verdict.status.value == "FAIL" and "the Gloo rerun ran" in verdict.detail
    report["isolation"]["gloo_rerun"] = False
    (run_dir / "attempt_0" / "report.json").write_text(json.dumps(report))
    verdict, _ = checks.cuda_oom(ctx)
    assert verdict.status.value == "PASS" and "no Gloo rerun" in verdict.detail


def test_the_default_output_directory_is_ignored_by_git() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    probe = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", "gpu_acceptance_out/summary.json"]
    )
    assert probe.returncode == 0


def test_cuda_oom_is_resources_on_the_rank_that_ran_out() -> None:
    record = recorded("oom")
    expect = dict(signature="cuda-out-of-memory", klass="resources")
    assert (
        judge.judge_failure(ran(record), record["report"], rank=1, **expect).status.value == "PASS"
    )
    wrong_rank = judge.judge_failure(ran(record), record["report"], rank=0, **expect)
    assert wrong_rank.status is judge.Status.FAIL and "root_cause_rank 1" in wrong_rank.detail
    assert judge.judge_failure(ran(record), None, rank=1, **expect).status is judge.Status.FAIL


def test_hang_needs_the_culprit_and_every_rank_stuck_where_it_was() -> None:
    record = recorded("hang")
    functions = {0: "wait_for_peer", 1: "load_next_batch"}
    args = (ran(record), record["report"], record["stacks"])
    verdict = judge.judge_hang(*args, culprit=1, functions=functions, verdict="program")
    assert verdict.status is judge.Status.PASS, verdict.detail
    assert judge.judge_hang(*args, culprit=0, functions=functions).status is judge.Status.FAIL
    spin = {0: "wait_for_peer", 1: "spin_on_gpu"}
    missing = judge.judge_hang(*args, culprit=1, functions=spin)
    assert missing.status is judge.Status.FAIL and "spin_on_gpu" in missing.detail
    failure = recorded("oom")
    assert (
        judge.judge_hang(ran(failure), failure["report"], {}, culprit=1, functions={}).status
        is judge.Status.FAIL
    )


def test_nccl_timeout_needs_the_signature_and_a_flight_recorder_dump() -> None:
    record = recorded("timeout")
    dump = {"flight-rank0": 5120}
    verdict = judge.judge_flight(ran(record), record["report"], dump)
    assert verdict.status is judge.Status.PASS and "flight-rank0 (5120 bytes)" in verdict.detail
    assert judge.judge_flight(ran(record), record["report"], {}).status is judge.Status.FAIL
    stray = judge.judge_flight(ran(record), record["report"], {}, ["/tmp/nccl_trace_rank_0"])
    assert stray.status is judge.Status.FAIL and "/tmp/nccl_trace_rank_0" in stray.detail
    assert (
        judge.judge_flight(ran(record), record["report"], {"flight-rank0": 0}).status.value
        == "FAIL"
    )


@pytest.mark.parametrize(
    ("statuses", "code"),
    [(["PASS", "SKIP"], 0), (["SKIP"], 0), (["PASS", "FAIL", "SKIP"], 1), (["PASS", "CUT"], 1)],
)
def test_summary_counts_and_exit_code(statuses: list[str], code: int) -> None:
    results = [
        judge.Result(name=f"c{i}", status=judge.Status(s), seconds=1.25, detail="d")
        for i, s in enumerate(statuses)
    ]
    assert judge.exit_code(results) == code
    data = judge.summary(results, {"gpus": "x"})
    assert data["exit_code"] == code and data["counts"]["SKIP"] == statuses.count("SKIP")
    assert json.loads(json.dumps(data))["checks"][0]["status"] == statuses[0]
    assert judge.format_line(results[0]) == f"{statuses[0]}  c0                       1.2 s  d"
    assert judge.render_summary(results).splitlines()[-1].startswith("gpu acceptance: ")


def test_smi_listing_is_parsed_with_commas_in_names() -> None:
    text = f"0, {UUID}, NVIDIA H200\n1, GPU-2, NVIDIA A100-SXM4-80GB, MIG\nNo devices\n"
    assert judge.parse_smi(text) == [
        H200,
        judge.Gpu(index=1, uuid="GPU-2", name="NVIDIA A100-SXM4-80GB, MIG"),
    ]
