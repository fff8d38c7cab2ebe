"""GPU acceptance run: install safelaunch, run every check within a time budget, summarise.

Started by scripts/gpu_acceptance.sh (see docs/gpu-acceptance.md). Without a GPU every
check is reported SKIP and the exit code is 0; otherwise 1 when any check failed or was
cut by the time budget (CUT: not run, which is not a pass).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # judge, shell, checks beside it

from checks import CHECKS, Check, Context
from judge import (
    Gpu,
    Result,
    Status,
    exit_code,
    format_line,
    judge_install,
    render_summary,
    summary,
)
from shell import KILL_GRACE, detect_gpus, install, python_version

REPO = Path(__file__).resolve().parents[2]


OVERRUN = 2 * KILL_GRACE  # what the checks together may take past their timeouts


def budget(only: list[str]) -> float:
    """Seconds for the checks (after the install): every selected check's own timeout, and
    a margin for the teardowns of those stopped at it. The budget never cuts a check short
    of its own timeout: a check is CUT only when earlier ones overran by more."""
    return sum(timeout for name, timeout, _ in CHECKS if not only or name in only) + OVERRUN


def say(line: str) -> None:
    print(line, flush=True)


def skipped(reason: str, only: list[str]) -> list[Result]:
    return [
        Result(name=name, status=Status.SKIP, seconds=0.0, detail=reason)
        for name, _, _ in CHECKS
        if not only or name in only
    ]


def run_checks(
    python: str, gpus: list[Gpu], work: Path, budget_end: float, only: list[str]
) -> list[Result]:
    """Every check in order, each within its own timeout; one that the budget left can no
    longer give its timeout is CUT (not run, and not green: the run exits 1)."""
    results = []
    for name, timeout, check in CHECKS:
        if only and name not in only:
            continue
        left = budget_end - time.monotonic()
        if left < timeout:
            result = Result(
                name=name,
                status=Status.CUT,
                seconds=0.0,
                detail=f"not run: {max(left, 0):.0f} s of the time budget left, it needs up "
                f"to {timeout:.0f} s (an earlier check overran)",
            )
        else:
            folder = work / name
            folder.mkdir()
            deadline = time.monotonic() + timeout
            ctx = Context(python=python, gpus=tuple(gpus), work=folder, deadline=deadline)
            result = run_one(name, check, ctx, cut=f"its {timeout:.0f} s timeout")
        results.append(result)
        say(format_line(result))
    return results


def run_one(name: str, check: Check, ctx: Context, cut: str) -> Result:
    """One check, timed; a check that raises is a FAIL line, not a lost run."""
    started = time.monotonic()
    try:
        verdict, evidence = check(ctx)
    except Exception as exc:
        seconds = time.monotonic() - started
        return Result(
            name=name,
            status=Status.FAIL,
            seconds=seconds,
            detail=f"the check itself broke: {exc!r}",
        )
    seconds = time.monotonic() - started
    late = time.monotonic() >= ctx.deadline - 0.5
    detail = verdict.detail + (f" (stopped at {cut})" if late else "")
    return Result(
        name=name, status=verdict.status, seconds=seconds, detail=detail, evidence=evidence
    )


def write_outputs(
    out: Path, results: list[Result], facts: dict[str, Any], work: Path | None
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary(results, facts), indent=1) + "\n")
    (out / "summary.txt").write_text(render_summary(results) + "\n")
    if work is not None:  # every run directory: logs, report.json, stacks, NCCL logs
        with tarfile.open(out / "artifacts.tar.gz", "w:gz") as archive:
            archive.add(work, arcname="gpu-acceptance")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="where the summary goes")
    parser.add_argument(
        "--budget", type=float, default=None, help="seconds for the checks [default: budget()]"
    )
    parser.add_argument("--only", default="", help="comma-separated check names")
    args = parser.parse_args(argv)
    only = [name for name in args.only.split(",") if name]
    unknown = sorted(set(only) - {name for name, _, _ in CHECKS})
    if unknown:
        known = ", ".join(name for name, _, _ in CHECKS)
        say(f"gpu acceptance: no check named {', '.join(unknown)} (checks: {known})")
        return 2
    gpus, reason = detect_gpus()
    facts = {"python": python_version(), "gpus": reason}
    if not gpus:
        say(f"gpu acceptance: no GPU on this machine ({reason}): every check is SKIP")
        results = [Result(name="install", status=Status.SKIP, seconds=0.0, detail="no GPU")]
        results += skipped("no GPU", only)
        for result in results:
            say(format_line(result))
        write_outputs(args.out, results, facts, None)
        say(render_summary(results).splitlines()[-1])
        return exit_code(results)
    seconds = budget(only) if args.budget is None else args.budget
    say(f"gpu acceptance: {reason}; python {python_version()}; budget {seconds:.0f} s")
    work = Path(tempfile.mkdtemp(prefix="gpu-acceptance-"))
    try:
        setup = install(sys.executable, REPO, work)
        verdict = judge_install(setup.mode, setup.imported_from, setup.problem)
        results = [
            Result(
                name="install", status=verdict.status, seconds=setup.seconds, detail=verdict.detail
            )
        ]
        say(format_line(results[0]))
        results += run_checks(sys.executable, gpus, work, time.monotonic() + seconds, only)
        write_outputs(args.out, results, facts, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say("")
    say(render_summary(results))
    say(f"summary: {args.out / 'summary.json'}; logs: {args.out / 'artifacts.tar.gz'}")
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
