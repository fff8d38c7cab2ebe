"""GPU acceptance: the checks. Each starts real processes on the GPU and hands what they
left behind (exit code, console, report.json, stacks, files) to a judge in judge.py.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge import (
    Gpu,
    Ran,
    Verdict,
    all_of,
    failed,
    judge_busy,
    judge_doctor,
    judge_failure,
    judge_flight,
    judge_hang,
    judge_hidden,
    judge_mapping,
    judge_refused,
)
from shell import read_json, run, stop_group

WORKERS = Path(__file__).resolve().parent / "workers"
HANG_TIMEOUT = "10"  # short, for the budget; NCCL's communicator is built before the hang


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """What every check needs: the interpreter, the GPUs, a scratch directory, a deadline."""

    python: str
    gpus: tuple[Gpu, ...]
    work: Path
    deadline: float  # monotonic: the check must end by then

    def remaining(self) -> float:
        return max(1.0, self.deadline - time.monotonic())

    def env(self, **extra: str) -> dict[str, str]:
        """The machine's environment without CUDA_VISIBLE_DEVICES, plus `extra`."""
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        env.update(extra)
        return env

    def safelaunch(self, *args: str, env: dict[str, str] | None = None) -> Ran:
        return run(
            [self.python, "-m", "safelaunch", *args],
            env=env or self.env(),
            cwd=self.work,
            timeout=self.remaining(),
        )

    def launch(
        self, name: str, script: str, *args: str, flags: tuple[str, ...] = (), **extra: str
    ) -> tuple[Ran, Path | None]:
        """safelaunch a worker; its run directory (under work/NAME) when it made one."""
        logs = self.work / name
        ran = self.safelaunch(
            "--log-dir",
            str(logs),
            "--color",
            "never",
            "--shutdown-timeout",
            "10",
            *flags,
            str(WORKERS / script),
            *args,
            env=self.env(**extra),
        )
        latest = logs / "latest"
        return ran, (latest.resolve() if latest.exists() else None)


Evidence = dict[str, Any]
Check = Callable[[Context], tuple[Verdict, Evidence]]


def _report(run_dir: Path | None) -> dict[str, Any] | None:
    return read_json(run_dir / "attempt_0" / "report.json") if run_dir else None


def _evidence(ran: Ran, run_dir: Path | None) -> Evidence:
    return {"exit_code": ran.rc, "run_dir": str(run_dir) if run_dir else None}


def doctor(ctx: Context) -> tuple[Verdict, Evidence]:
    ran = ctx.safelaunch("doctor", "--json")
    (ctx.work / "doctor.json").write_text(ran.output)
    return judge_doctor(ran, ctx.gpus), {"exit_code": ran.rc}


@dataclass(frozen=True, slots=True)
class Selection:
    """One CUDA_VISIBLE_DEVICES for one rank, and what the rank must then see."""

    visible: str | None  # None: unset
    expected: tuple[Gpu, ...] | None  # the GPUs CUDA shows, in cuda:N order; None: refused
    note: str | None = None  # a warning the banner must carry


def _no_such_uuid(uuid: str) -> str:
    """A UUID of the same shape that names no GPU (its last digit changed)."""
    return uuid[:-1] + ("0" if uuid[-1:] != "0" else "1")


def selections(variant: str, gpus: Sequence[Gpu]) -> list[Selection]:
    """What the mapping check `variant` sets, in turn, and expects.

    With several GPUs the index and the UUID select the last one, not cuda:0's own: the
    mapping must move. With one GPU selecting it is also the default, and a launcher that
    ignored CUDA_VISIBLE_DEVICES would pass: there a selection of no GPU (the next index,
    a UUID of none) must be refused, and the GPU's real UUID must still resolve.
    """
    last = gpus[-1]
    if variant == "unset":
        return [Selection(None, tuple(gpus))]
    if variant == "stop":  # CUDA stops silently at an entry it cannot use
        return [Selection(f"{last.index},99", (last,), "CUDA stops at '99'")]
    chosen = str(last.index) if variant == "index" else last.uuid
    if len(gpus) > 1:
        return [Selection(chosen, (last,))]
    if variant == "index":
        return [Selection(str(len(gpus)), None)]
    return [Selection(_no_such_uuid(last.uuid), None), Selection(chosen, (last,))]


def mapping(variant: str) -> Check:
    """One rank under each CUDA_VISIBLE_DEVICES of `selections(variant)`."""

    def check(ctx: Context) -> tuple[Verdict, Evidence]:
        verdicts, evidence = [], []
        for step, chosen in enumerate(selections(variant, ctx.gpus)):
            extra = {} if chosen.visible is None else {"CUDA_VISIBLE_DEVICES": chosen.visible}
            name, flags = f"mapping-{variant}-{step}", ("--nproc-per-node", "1")
            ran, run_dir = ctx.launch(name, "device_probe.py", flags=flags, **extra)
            evidence.append({**_evidence(ran, run_dir), "CUDA_VISIBLE_DEVICES": chosen.visible})
            if chosen.expected is None:
                verdicts.append(judge_hidden(ran, str(chosen.visible)))
            else:
                verdicts.append(judge_mapping(ran, list(chosen.expected), chosen.note))
        return all_of(verdicts), {"steps": evidence}

    return check


def refused(ctx: Context) -> tuple[Verdict, Evidence]:
    nproc = len(ctx.gpus) + 1
    ran, run_dir = ctx.launch("refused", "device_probe.py", flags=("--nproc-per-node", str(nproc)))
    return judge_refused(ran, nproc, len(ctx.gpus)), _evidence(ran, run_dir)


def _hold(ctx: Context, gib: float) -> tuple[subprocess.Popen[bytes], str]:
    """A process holding `gib` GiB on cuda:0, once it says so (or what it said instead)."""
    holder = subprocess.Popen(
        [ctx.python, str(WORKERS / "hold_memory.py"), f"{gib:.1f}", "300"],
        env=ctx.env(),  # cuda:0 is GPU 0, as doctor numbers it
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    said = b""
    if holder.stdout is None:  # never (stdout=PIPE); says so to the type checker
        return holder, ""
    until = time.monotonic() + min(60.0, ctx.remaining())
    while b"holding" not in said and time.monotonic() < until and holder.poll() is None:
        ready, _, _ = select.select([holder.stdout], [], [], 1.0)
        if ready:
            said += os.read(holder.stdout.fileno(), 4096)
    return holder, said.decode(errors="replace").strip()


def busy(ctx: Context) -> tuple[Verdict, Evidence]:
    """doctor while another process holds GPU memory; if NVML lists no processes here,
    again with the GPU almost full (the low-free-memory rule)."""
    gpu = ctx.gpus[0].index
    verdict = failed("not run")
    evidence: Evidence = {}
    for attempt, gib in enumerate((2.0, None)):
        if gib is None:  # second try: leave 5% free
            inventory = read_json(ctx.work / "busy-doctor-0.json") or {}
            first = (inventory.get("inventory", {}).get("gpus") or [{}])[0]
            if first.get("processes") or not first.get("memory_total_mib"):
                break
            free = first["memory_total_mib"] - first["memory_used_mib"]
            gib = max(1.0, (free - 0.05 * first["memory_total_mib"]) / 1024)
        holder, said = _hold(ctx, gib)
        try:
            if "holding" not in said:
                last = said.splitlines()[-1] if said else "no output"
                return failed(f"the memory holder did not start: {last[:200]}"), evidence
            ran = ctx.safelaunch("doctor", "--json")
        finally:
            stop_group(holder)
        (ctx.work / f"busy-doctor-{attempt}.json").write_text(ran.output)
        verdict = judge_busy(ran, holder.pid, gpu)
        evidence = {"holder": said, "holder_pid": holder.pid, "attempt": attempt}
        if verdict.status.value == "PASS":
            break
    return verdict, evidence


def duplicate_gpu(ctx: Context) -> tuple[Verdict, Evidence]:
    # --no-preflight: two ranks on one GPU is the point (preflight refuses it, rightly);
    # --isolate always: duplicate-gpu is an environment fault, which auto does not rerun
    flags = ("--nproc-per-node", "2", "--no-preflight", "--isolate", "always")
    ran, run_dir = ctx.launch(
        "nccl-duplicate", "nccl_pair.py", "duplicate", flags=(*flags, "--isolate-timeout", "40")
    )
    verdict = judge_failure(
        ran,
        _report(run_dir),
        signature="duplicate-gpu",
        klass="environment/launch",
        verdict="communication layer",
    )
    return verdict, _evidence(ran, run_dir)


def cuda_oom(ctx: Context) -> tuple[Verdict, Evidence]:
    flags = ("--nproc-per-node", "2", "--no-preflight")
    ran, run_dir = ctx.launch("cuda-oom", "cuda_oom.py", flags=flags)
    # documented: a Gloo job's out-of-memory is not rerun on Gloo (isolation.md)
    verdict = judge_failure(
        ran,
        _report(run_dir),
        signature="cuda-out-of-memory",
        klass="resources",
        rank=1,
        gloo_rerun=False,
    )
    return verdict, _evidence(ran, run_dir)


def _stacks(run_dir: Path | None) -> dict[str, str]:
    folder = run_dir / "attempt_0" / "stacks" if run_dir else None
    if folder is None or not folder.is_dir():
        return {}
    return {path.name: path.read_text(errors="replace") for path in folder.iterdir()}


def hang(mode: str) -> Check:
    """spin: rank 1 in a CUDA kernel + sync (CPU busy: NCCL's rule must ignore it);
    sleep: rank 1 away, rank 0 inside an NCCL all_reduce; its Gloo rerun hangs the same."""

    def check(ctx: Context) -> tuple[Verdict, Evidence]:
        flags = ["--nproc-per-node", "2", "--no-preflight", "--hang-timeout", HANG_TIMEOUT]
        flags += ["--isolate", "never"] if mode == "spin" else ["--isolate-timeout", "35"]
        ran, run_dir = ctx.launch(f"hang-{mode}", "nccl_pair.py", mode, flags=tuple(flags))
        stacks = _stacks(run_dir)
        culprit_function = "spin_on_gpu" if mode == "spin" else "load_next_batch"
        verdict = judge_hang(
            ran,
            _report(run_dir),
            stacks,
            culprit=1,
            functions={0: "wait_for_peer", 1: culprit_function},
            verdict=None if mode == "spin" else "program",
        )
        if "Duplicate GPU detected" in ran.output:
            verdict = failed(
                "NCCL refused two ranks on one GPU even with a NCCL_HOSTID per rank: "
                "an NCCL hang cannot be produced on this one-GPU machine"
            )
        return verdict, {**_evidence(ran, run_dir), "stack_files": sorted(stacks)}

    return check


def _default_dumps(since: float) -> list[str]:
    """Flight recorder files written to torch's default places since `since` (wall clock):
    where the dump lands when this torch does not read TORCH_FR_DUMP_TEMP_FILE."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "torch"
    places = [*Path("/tmp").glob("nccl_trace_rank_*"), *cache.glob("comm_lib_trace_rank_*")]
    return sorted(str(p) for p in places if p.stat().st_mtime >= since)


def flight_recorder(ctx: Context) -> tuple[Verdict, Evidence]:
    """NCCL's own 6 s timeout (safelaunch's hang timeout is a backstop far behind it)."""
    started = time.time()
    flags = ("--nproc-per-node", "2", "--no-preflight", "--hang-timeout", "45")
    ran, run_dir = ctx.launch(
        "nccl-timeout", "nccl_pair.py", "timeout", flags=(*flags, "--isolate", "never")
    )
    attempt = run_dir / "attempt_0" if run_dir else None
    dumps = {p.name: p.stat().st_size for p in attempt.glob("flight-rank*")} if attempt else {}
    elsewhere = _default_dumps(started)
    verdict = judge_flight(ran, _report(run_dir), dumps, elsewhere)
    return verdict, {**_evidence(ran, run_dir), "flight_files": dumps, "elsewhere": elsewhere}


# name, timeout (s), check. The run's budget is their sum plus each one's kill grace
# (acceptance.budget), so a check ends at its own timeout, not at the budget's; with the
# install it fits one 600 s command on the lent GPU machine (docs/gpu-acceptance.md).
# Ordered by what matters most.
CHECKS: tuple[tuple[str, float, Check], ...] = (
    ("doctor", 40, doctor),
    ("mapping-unset", 30, mapping("unset")),
    ("mapping-index", 30, mapping("index")),
    ("mapping-uuid", 40, mapping("uuid")),  # two launches on a one-GPU machine
    ("mapping-stop", 30, mapping("stop")),
    ("mapping-refused", 20, refused),
    ("busy-gpu", 50, busy),
    ("nccl-duplicate-gpu", 70, duplicate_gpu),  # the job, then its Gloo rerun (40 s cap)
    ("cuda-oom", 35, cuda_oom),
    ("hang-cuda-spin", 40, hang("spin")),
    ("hang-nccl-collective", 80, hang("sleep")),  # the hang, then the Gloo rerun (35 s)
    ("nccl-flight-recorder", 45, flight_recorder),
)


def names() -> list[str]:
    return [name for name, _, _ in CHECKS]


if __name__ == "__main__":  # pragma: no cover - a listing for people
    print("\n".join(names()), file=sys.stdout)
