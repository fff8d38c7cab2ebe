"""GPU acceptance: what each check's outputs mean, as pure functions over recorded outputs.

The runner (acceptance.py) starts processes and collects what they left behind (exit
code, console text, report.json, stack dumps, files); everything here only reads those
records, so the verdicts are unit-tested on CPU with recorded outputs
(tests/test_gpu_acceptance.py). Standard library only: it runs on the GPU machine's own
python, before or without safelaunch installed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    """A check's verdict. SKIP: it cannot run here (no GPU); CUT: it did not run because
    the time budget was spent, which is not green (the run exits 1)."""

    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"
    CUT = "CUT"


@dataclass(frozen=True, slots=True, kw_only=True)
class Ran:
    """One command as it ran: exit code (None when killed at its timeout) and its output."""

    rc: int | None
    output: str
    seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """A check's status and the one line that explains it."""

    status: Status
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """A finished check, as printed and written to the summary."""

    name: str
    status: Status
    seconds: float
    detail: str
    evidence: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    """One GPU as nvidia-smi (or NVML) lists it, independently of safelaunch."""

    index: int
    uuid: str
    name: str


def passed(detail: str) -> Verdict:
    return Verdict(status=Status.PASS, detail=detail)


def failed(detail: str) -> Verdict:
    return Verdict(status=Status.FAIL, detail=detail)


# --- what the outputs say -------------------------------------------------------

_BANNER = re.compile(r"local rank (\d+) -> cuda:(\d+) -> GPU (\d+) \(([^,]+),")
_PROBE = re.compile(r"ACCEPTANCE (\{.*\})")


def banner_lines(output: str) -> list[tuple[int, int, int, str]]:
    """(local rank, cuda index, physical GPU index, UUID prefix) from the mapping banner."""
    return [
        (int(m[1]), int(m[2]), int(m[3]), m[4])
        for m in (_BANNER.search(line) for line in output.splitlines())
        if m
    ]


def probe_records(output: str) -> list[dict[str, Any]]:
    """The JSON records the GPU workers print (one `ACCEPTANCE {...}` line each)."""
    records = []
    for line in output.splitlines():
        match = _PROBE.search(line)
        if match:
            try:
                records.append(json.loads(match[1]))
            except ValueError:
                continue
    return records


def parse_smi(text: str) -> list[Gpu]:
    """`nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader` output."""
    gpus = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            gpus.append(Gpu(index=int(parts[0]), uuid=parts[1], name=", ".join(parts[2:])))
    return gpus


def doctor_json(output: str) -> dict[str, Any] | None:
    """The JSON object `doctor --json` printed, whatever a library wrote around it."""
    start = output.find("{")
    try:
        data, _ = json.JSONDecoder().raw_decode(output[start:]) if start >= 0 else (None, 0)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _ended(ran: Ran) -> str:
    return "killed at its timeout" if ran.rc is None else f"exit {ran.rc}"


def _tail(output: str, lines: int = 3) -> str:
    kept = [line.strip() for line in output.strip().splitlines()[-lines:]]
    return " | ".join(kept)[:300]


# --- judges, one per check -----------------------------------------------------------


def judge_install(mode: str, imported_from: str, problem: str | None) -> Verdict:
    """pip installed it (PASS), or the run fell back to PYTHONPATH (FAIL: we want to know)."""
    if problem:
        return failed(f"{problem}; checks ran from the tree via PYTHONPATH ({imported_from})")
    return passed(f"{mode}; safelaunch imported from {imported_from}")


def judge_doctor(ran: Ran, smi: Sequence[Gpu]) -> Verdict:
    """`safelaunch doctor --json`: NVML's inventory matches nvidia-smi, torch sees CUDA and NCCL."""
    report = doctor_json(ran.output)
    if report is None:
        return failed(f"doctor --json gave no JSON ({_ended(ran)}): {_tail(ran.output)}")
    inventory = report.get("inventory", {})
    gpus = inventory.get("gpus", [])
    if inventory.get("problem") or not gpus:
        return failed(f"NVML inventory empty: {inventory.get('problem')}")
    seen = [(g["index"], g["uuid"], g["name"]) for g in gpus]
    wanted = [(g.index, g.uuid, g.name) for g in smi]
    if smi and seen != wanted:
        return failed(f"NVML says {seen}, nvidia-smi says {wanted}")
    torch = report.get("torch", {})
    if torch.get("import_error") or not torch.get("cuda") or not torch.get("nccl_available"):
        return failed(f"torch probe: {torch}")
    if torch.get("device_count") != len(gpus):
        return failed(f"torch sees {torch.get('device_count')} GPU(s), NVML {len(gpus)}")
    if len(report.get("mapping", [])) != len(gpus):
        return failed(f"mapping lines {report.get('mapping')} for {len(gpus)} GPU(s)")
    errors = [f["message"] for f in report.get("findings", []) if f["level"] == "error"]
    if errors or ran.rc != 0:
        return failed(f"{_ended(ran)}, errors: {errors}")
    warnings = [f["message"] for f in report.get("findings", []) if f["level"] == "warning"]
    first = gpus[0]
    return passed(
        f"{len(gpus)} GPU(s) ({first['name']}, {first['uuid'][:12]}), driver "
        f"{inventory.get('driver_version')} (CUDA {inventory.get('cuda_driver_version')}); "
        f"torch {torch.get('torch')} CUDA {torch.get('cuda')} NCCL {torch.get('nccl')}; "
        f"verdict {report.get('verdict')}" + (f", warnings: {warnings}" if warnings else "")
    )


def judge_mapping(ran: Ran, expected: Sequence[Gpu], note: str | None = None) -> Verdict:
    """One rank: the banner names the GPU the rank really got (index and UUID).

    `expected`: the GPUs CUDA should show, in cuda:N order; `note`: a warning the
    banner must carry (e.g. CUDA's silent stop at a bad entry).
    """
    if ran.rc != 0:
        return failed(f"launch {_ended(ran)}: {_tail(ran.output)}")
    records = probe_records(ran.output)
    if not records:
        return failed(f"the rank printed no record: {_tail(ran.output)}")
    seen = records[0]
    if seen.get("device_count") != len(expected):
        return failed(f"the rank sees {seen.get('device_count')} GPU(s), expected {len(expected)}")
    if note is not None and note not in ran.output:
        return failed(f"no warning {note!r} in the banner")
    lines = banner_lines(ran.output)
    if not expected:
        return (
            failed(f"banner maps GPUs the rank cannot see: {lines}")
            if lines
            else passed("no GPU visible, none in the banner; the rank agrees")
        )
    if not lines:
        return failed("no 'local rank -> cuda:N -> GPU' line in the banner")
    local, cuda, physical, prefix = lines[0]
    uuid = str(seen.get("uuid", ""))
    if (cuda, physical) != (0, expected[0].index) or not uuid.lower().startswith(prefix.lower()):
        return failed(
            f"banner: local rank {local} -> cuda:{cuda} -> GPU {physical} ({prefix}); "
            f"the rank's cuda:0 is {uuid}, expected GPU {expected[0].index}"
        )
    return passed(f"cuda:0 -> GPU {physical} ({prefix}), the rank's own device agrees")


def judge_hidden(ran: Ran, visible: str) -> Verdict:
    """A CUDA_VISIBLE_DEVICES that names no GPU of this machine: exit 78, nothing started.

    On a one-GPU machine selecting GPU 0 is also what an unset variable gives, so only a
    selection that must change the outcome tells a launcher that reads the variable from
    one that ignores it (the ignoring one starts the rank on GPU 0)."""
    phrase = f"CUDA_VISIBLE_DEVICES={visible}: CUDA will see no GPU"
    if ran.rc == 78 and phrase in ran.output and "[rank" not in ran.output:
        return passed(f"{phrase}: exit 78, no rank started")
    return failed(f"{_ended(ran)}, expected exit 78 and {phrase!r}: {_tail(ran.output)}")


def all_of(verdicts: Sequence[Verdict]) -> Verdict:
    """Several steps of one check: PASS when every one passed, else the first failure."""
    failure = next((v for v in verdicts if v.status is not Status.PASS), None)
    if failure is not None:
        return failure
    return passed("; ".join(v.detail for v in verdicts))


def judge_refused(ran: Ran, nproc: int, visible: int) -> Verdict:
    """More ranks than visible GPUs: exit 78, the rank that would fail named, nothing started."""
    phrase = f"local rank {visible} would fail with 'CUDA error: invalid device ordinal'"
    if ran.rc == 78 and phrase in ran.output and "[rank" not in ran.output:
        return passed(f"{nproc} ranks on {visible} GPU(s): exit 78, {phrase}")
    return failed(f"{_ended(ran)}, expected exit 78 and {phrase!r}: {_tail(ran.output)}")


def judge_busy(ran: Ran, holder_pid: int, gpu: int) -> Verdict:
    """doctor while another process holds memory: a warning naming it (or low free memory)."""
    report = doctor_json(ran.output)
    if report is None:
        return failed(f"doctor --json gave no JSON ({_ended(ran)}): {_tail(ran.output)}")
    warnings = [f["message"] for f in report.get("findings", []) if f["level"] == "warning"]
    gpus = report.get("inventory", {}).get("gpus", [])
    listed = any(g.get("processes") for g in gpus if g.get("index") == gpu)
    by_pid = [w for w in warnings if f"GPU {gpu} is in use by pid {holder_pid} " in w]
    if by_pid:
        return passed(by_pid[0])
    low = [w for w in warnings if f"GPU {gpu} has only" in w]
    if low and not listed:
        return passed(f"{low[0]} (NVML lists no processes here, the low-memory rule caught it)")
    return failed(f"no busy warning for pid {holder_pid} on GPU {gpu}; warnings: {warnings}")


def _report_says(report: Mapping[str, Any] | None) -> str:
    if not report:
        return "no report.json"
    diagnosis = report.get("diagnosis") or {}
    return (
        f"status {report.get('status')}, class {diagnosis.get('class')}, signature "
        f"{diagnosis.get('signature')}, rank {diagnosis.get('root_cause_rank')}: "
        f"{diagnosis.get('error')}"
    )


def gloo_verdict(report: Mapping[str, Any] | None) -> str | None:
    """The Gloo isolation rerun's verdict in report.json, if it ran."""
    isolation = (report or {}).get("isolation") or {}
    for rerun in isolation.get("reruns", []):
        if rerun.get("name") == "isolate_gloo":
            return str(rerun.get("verdict"))
    return None


def judge_failure(
    ran: Ran,
    report: Mapping[str, Any] | None,
    *,
    signature: str,
    klass: str,
    rank: int | None = None,
    verdict: str | None = None,
    gloo_rerun: bool | None = None,
) -> Verdict:
    """A failed job: the signature, class, root-cause rank and (optionally) isolation verdict,
    and whether the Gloo rerun ran (`gloo_rerun`: None, not judged)."""
    if report is None or report.get("status") != "failed":
        return failed(f"{_ended(ran)}; {_report_says(report)}: {_tail(ran.output)}")
    diagnosis = report.get("diagnosis") or {}
    wanted: dict[str, object] = {"signature": signature, "class": klass}
    if rank is not None:
        wanted["root_cause_rank"] = rank
    wrong = [
        f"{key} {diagnosis.get(key)!r}, expected {want!r}"
        for key, want in wanted.items()
        if diagnosis.get(key) != want
    ]
    if verdict is not None and gloo_verdict(report) != verdict:
        wrong.append(f"isolation verdict {gloo_verdict(report)!r}, expected {verdict!r}")
    reran = bool((report.get("isolation") or {}).get("gloo_rerun"))
    if gloo_rerun is not None and reran != gloo_rerun:
        wrong.append("the Gloo rerun ran" if reran else "no Gloo rerun ran")
    if ran.rc == 0:
        wrong.append("safelaunch exited 0")
    if wrong:
        return failed("; ".join(wrong) + f" ({_report_says(report)})")
    isolation = f", Gloo rerun: {verdict}" if verdict else ""
    if gloo_rerun is False:
        isolation += ", no Gloo rerun"
    return passed(
        f"rank {diagnosis.get('root_cause_rank')}: {signature} ({klass}){isolation}, "
        f"exit {ran.rc}: {str(diagnosis.get('error'))[:120]}"
    )


def judge_hang(
    ran: Ran,
    report: Mapping[str, Any] | None,
    stacks: Mapping[str, str],
    *,
    culprit: int,
    functions: Mapping[int, str],
    verdict: str | None = None,
) -> Verdict:
    """A hang: exit 124, the culprit named, every rank's stack dumped at the expected place.

    `stacks`: file name -> text of attempt_0/stacks/; `functions`: rank -> a function
    name its dump must show (where it was stuck).
    """
    hang = (report or {}).get("hang")
    if ran.rc != 124 or not hang:
        return failed(f"{_ended(ran)}, expected a hang (124); {_report_says(report)}")
    wrong = []
    if hang.get("culprits") != [culprit]:
        wrong.append(f"culprits {hang.get('culprits')} ({hang.get('reason')}), expected {culprit}")
    for rank, function in functions.items():
        dump = stacks.get(f"rank{rank}.txt", "")
        if f" in {function}" not in dump:
            wrong.append(f"rank {rank}'s stack has no {function}")
    if "hang.json" not in stacks:
        wrong.append("no stacks/hang.json")
    if verdict is not None and gloo_verdict(report) != verdict:
        wrong.append(f"isolation verdict {gloo_verdict(report)!r}, expected {verdict!r}")
    if wrong:
        return failed("; ".join(wrong))
    isolation = f"; Gloo rerun: {verdict}" if verdict else ""
    return passed(
        f"hung after {hang.get('stuck_for_s')} s (timeout {hang.get('timeout_s')}); culprit rank "
        f"{culprit}: {hang.get('reason')}; stacks of ranks {sorted(functions)}{isolation}"
    )


def judge_flight(
    ran: Ran,
    report: Mapping[str, Any] | None,
    dumps: Mapping[str, int],
    elsewhere: Sequence[str] = (),
) -> Verdict:
    """NCCL's watchdog timeout: diagnosed as collective-timeout, the flight recorder dumped.

    `dumps`: flight recorder file name -> size in the attempt directory; `elsewhere`:
    dumps found in torch's default places instead (its variables not honoured).
    """
    verdict = judge_failure(ran, report, signature="collective-timeout", klass="communication")
    written = {name: size for name, size in dumps.items() if size > 0}
    strays = f"; dumped to torch's default place instead: {list(elsewhere)}" if elsewhere else ""
    if verdict.status is Status.FAIL:
        return failed(f"{verdict.detail}; flight recorder files: {dict(dumps) or 'none'}{strays}")
    if not written:
        return failed(f"no flight recorder dump in the attempt directory{strays}; {verdict.detail}")
    files = ", ".join(f"{name} ({size} bytes)" for name, size in sorted(written.items()))
    return passed(f"{verdict.detail[:140]}; flight recorder: {files}")


# --- the summary ---------------------------------------------------------------------


def format_line(result: Result) -> str:
    """`PASS  doctor                  3.2 s  detail`"""
    return f"{result.status.value}  {result.name:<22}{result.seconds:6.1f} s  {result.detail}"


def exit_code(results: Sequence[Result]) -> int:
    """1 when a check failed or was cut by the time budget; else 0 (a check that cannot
    run here is SKIP, not a failure: a CPU machine exits 0)."""
    return 1 if any(r.status in (Status.FAIL, Status.CUT) for r in results) else 0


def summary(results: Sequence[Result], facts: Mapping[str, Any]) -> dict[str, Any]:
    """The summary file's content: the machine, every check, the counts."""
    counts = {status.value: sum(r.status is status for r in results) for status in Status}
    return {
        "schema": "safelaunch.gpu-acceptance/1",
        "machine": dict(facts),
        "counts": counts,
        "total_s": round(sum(r.seconds for r in results), 1),
        "checks": [{**asdict(r), "status": r.status.value} for r in results],
        "exit_code": exit_code(results),
    }


def render_summary(results: Sequence[Result]) -> str:
    """The last lines printed: one per check, then the counts."""
    counts = ", ".join(f"{sum(r.status is s for r in results)} {s.value}" for s in Status)
    total = sum(r.seconds for r in results)
    return "\n".join(
        [*(format_line(r) for r in results), f"gpu acceptance: {counts} in {total:.0f} s"]
    )
