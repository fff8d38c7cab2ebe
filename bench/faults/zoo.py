"""Running a zoo case under safelaunch or torchrun, and scoring what each one reported.

safelaunch is read from its report.json (the console's verdict, machine-readable) and,
when nothing was started, from its one error line: only what that line says (a file:line,
its exit code), never a class or rerun answer it did not print. torchrun is read as a
person reads its console: the rank in its "Root Cause" block, the file:line of the rank's
traceback, its exit code; it has no class and no rerun. Both get the same time budget.

Exit codes are scored twice: "exit" where the root cause has a code of its own (a rank's
sys.exit / exception status, 0 for a clean job), for both launchers; "convention" where
the code is one of safelaunch's conventions (124 for a hang, 128+N for a rank killed by
signal N), safelaunch's alone and kept out of the total, as torchrun has no such rule.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cases import SCENARIOS, Case

PYTHON = sys.executable
TORCHRUN = str(Path(PYTHON).with_name("torchrun"))
HANG_TIMEOUT = 6.0  # --hang-timeout for every case; the clean cases stay quiet longer than this
FIELDS = ("class", "rank", "location", "exit", "convention", "isolate")
_ROOT = re.compile(r"Root Cause.*?rank\s*:\s*(\d+) \(local_rank: \d+\)", re.S)
_FILE_LINE = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)')
_PREFIX = re.compile(r"^\[(?:rank|default)?(\d+)\]:\s?")
_LIBRARY = ("site-packages", "dist-packages", "/lib/python", "<frozen")
# this checkout's own package, wherever it is cloned: a clone into a directory named
# safelaunch puts "safelaunch/" in every scenario's path too
_PACKAGE = str(Path(__file__).resolve().parents[2] / "safelaunch") + os.sep


@dataclass(frozen=True, slots=True, kw_only=True)
class Seen:
    """What one launcher's output says about a case."""

    klass: str | None
    ranks: tuple[int, ...]
    location: str | None  # file name:line
    exit_code: int
    isolate: bool | None  # None: the launcher has no such thing, or did not say
    conventions: bool  # the launcher has safelaunch's exit conventions (124, 128+N)
    wall: float
    output: str = field(repr=False)
    run_dir: Path | None = None


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str, float]:
    """Run in its own session; SIGTERM (then SIGKILL) the whole session past `timeout`."""
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
    wall = time.monotonic() - started
    with contextlib.suppress(ProcessLookupError):  # nothing of the case may outlive it
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out.decode("utf-8", "replace"), wall


def _target(case: Case) -> list[str]:
    return ["-m", case.module] if case.module else [str(case.script)]


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "SAFELAUNCH_"))}
    env.update({"SAFELAUNCH_COLOR": "never", "PYTHONDONTWRITEBYTECODE": "1"})
    env.update(extra)
    return env


def budget(case: Case) -> float:
    """Seconds either launcher gets for the case before the harness stops it (the same)."""
    return 60.0 if case.kind == "hang" else 120.0


def exit_is_own(case: Case) -> bool:
    """The expected exit code is the root cause's own, not a launcher's convention."""
    return case.kind != "hang" and case.exit_code < 128


def short(location: str | None) -> str | None:
    """`/a/b/train.py:12 in main` -> `train.py:12`."""
    if not location:
        return None
    match = re.match(r"(?P<path>.+?):(?P<line>\d+)(?: in .*)?$", location)
    return f"{Path(match['path']).name}:{match['line']}" if match else None


def run_safelaunch(
    case: Case, where: Path, isolate: str = "auto", env: dict[str, str] | None = None
) -> Seen:
    """The case under safelaunch (logs under `where`); `env` is added to the case's."""
    cwd = SCENARIOS if case.module else where
    return launch_safelaunch(
        _target(case), cwd, where, {**case.env, **(env or {})}, budget(case), isolate=isolate
    )


def launch_safelaunch(
    target: list[str],
    cwd: Path,
    where: Path,
    env: dict[str, str],
    timeout: float,
    *,
    nproc: int = 2,
    hang_timeout: float = HANG_TIMEOUT,
    isolate: str = "auto",
) -> Seen:
    """`target` (a script and its arguments) under safelaunch, logs under `where`."""
    where.mkdir(parents=True, exist_ok=True)
    logs = where / "logs"
    cmd = [
        PYTHON, "-m", "safelaunch", "--log-dir", str(logs), f"--nproc-per-node={nproc}",
        "--hang-timeout", str(hang_timeout), "--isolate", isolate, "--isolate-timeout", "20",
        *target,
    ]  # fmt: skip
    code, output, wall = _run(cmd, cwd, _env(env), timeout)
    run_dir = (logs / "latest").resolve() if (logs / "latest").exists() else None
    reports = sorted(run_dir.glob("attempt_*/report.json")) if run_dir else []
    if not reports:
        return refused(output, code, wall)
    report = json.loads(reports[-1].read_text())
    return Seen(
        klass=report["diagnosis"]["class"],
        ranks=reported_ranks(report),
        location=reported_location(report),
        exit_code=code,
        isolate=bool(report["isolation"] and report["isolation"]["gloo_rerun"]),
        conventions=True,
        wall=wall,
        output=output,
        run_dir=run_dir,
    )


def refused(output: str, code: int, wall: float) -> Seen:
    """safelaunch stopped before any rank started: its one line is all it said.

    No class and no rerun answer are inferred from it (the line names neither), and no
    rank (none ran): scored on what it printed, as torchrun is.
    """
    found = re.search(r"([\w./-]+\.py):(\d+)", output)
    return Seen(
        klass=None,
        ranks=(),
        location=f"{Path(found[1]).name}:{found[2]}" if found else None,
        exit_code=code,
        isolate=None,
        conventions=True,
        wall=wall,
        output=output,
    )


def reported_ranks(report: dict[str, Any]) -> tuple[int, ...]:
    """The root cause, or a hang's culprits."""
    if report["hang"] is not None:
        return tuple(report["hang"]["culprits"])
    rank = report["diagnosis"]["root_cause_rank"]
    return () if rank is None else (rank,)


def reported_location(report: dict[str, Any]) -> str | None:
    """The root cause's file:line, or where a hang's culprits are."""
    hang = report["hang"]
    if hang is not None:
        culprits = set(hang["culprits"])
        for group in hang["groups"]:
            if culprits and set(group["ranks"]) <= culprits:
                return short(group["location"])
        return None
    return short(report["diagnosis"]["location"])


def run_torchrun(case: Case, where: Path) -> Seen:
    """The case under torchrun 2.13, read as its console reads."""
    cwd = SCENARIOS if case.module else where
    return launch_torchrun(_target(case), cwd, where, case.env, budget(case))


def launch_torchrun(
    target: list[str], cwd: Path, where: Path, env: dict[str, str], timeout: float, nproc: int = 2
) -> Seen:
    """`target` under torchrun 2.13 (run in `cwd`), read as its console reads."""
    where.mkdir(parents=True, exist_ok=True)
    cmd = [TORCHRUN, f"--nproc-per-node={nproc}", *target]
    code, output, wall = _run(cmd, cwd, _env(env), timeout)
    return read_torchrun(output, code, wall)


def read_torchrun(output: str, code: int, wall: float) -> Seen:
    """torchrun's console as a person reads it."""
    root = _ROOT.search(output)
    rank = int(root[1]) if root else None
    return Seen(
        klass=None,
        ranks=() if rank is None else (rank,),
        location=_torchrun_location(output, rank),
        exit_code=code,
        isolate=None,
        conventions=False,
        wall=wall,
        output=output,
    )


def _torchrun_location(output: str, rank: int | None) -> str | None:
    """The innermost user frame of the root rank's traceback (else of the last one shown)."""
    blocks: list[tuple[int | None, list[tuple[str, str]]]] = []
    current: list[tuple[str, str]] | None = None
    for raw in output.splitlines():
        prefix = _PREFIX.match(raw)
        line = raw[prefix.end() :] if prefix else raw
        if line.startswith("Traceback (most recent"):
            current = []
            blocks.append((int(prefix[1]) if prefix else None, current))
            continue
        frame = _FILE_LINE.search(line)
        if current is not None and frame:
            current.append((frame["path"], frame["line"]))
    own = ("torch/distributed/run.py", "torch/distributed/elastic", "bin/torchrun")
    blocks = [b for b in blocks if not any(p in path for path, _ in b[1] for p in own)]
    chosen = [b for b in blocks if b[0] == rank] or blocks
    if not chosen:  # a SyntaxError in the script itself prints its File line, no Traceback
        loose = [(m["path"], m["line"]) for m in _FILE_LINE.finditer(output)]
        chosen = [(None, [f for f in loose if not any(p in f[0] for p in own)])]
    for path, line in reversed(chosen[-1][1]):
        if not path.startswith(_PACKAGE) and not any(part in path for part in _LIBRARY):
            return f"{Path(path).name}:{line}"
    return None


def score(case: Case, seen: Seen) -> dict[str, bool | None]:
    """Field by field: right or wrong (None: not applicable to this launcher)."""
    expected_ranks = set(case.ranks)
    ranks_ok = (not seen.ranks and not expected_ranks) or (
        bool(seen.ranks) and set(seen.ranks) <= expected_ranks
    )
    return {
        "class": seen.klass == case.klass,
        "rank": ranks_ok,
        "location": seen.location == case.fault_line(),
        "exit": seen.exit_code == case.exit_code if exit_is_own(case) else None,
        "convention": (
            seen.exit_code == case.exit_code if seen.conventions and not exit_is_own(case) else None
        ),
        "isolate": None if seen.isolate is None else seen.isolate == case.isolate,
    }


def available(case: Case) -> bool:
    """The tools the case needs are here."""
    return case.needs is None or shutil.which(case.needs) is not None
