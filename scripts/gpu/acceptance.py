"""GPU acceptance run: install safelaunch, run every check within a time budget, summarise.

Started by scripts/gpu_acceptance.sh (see docs/gpu-acceptance.md). Without a GPU every
check is reported SKIP and the exit code is 0; otherwise 1 when any check failed.
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
from shell import detect_gpus, install, python_version

REPO = Path(__file__).resolve().parents[2]
BUDGET = 330.0  # seconds for everything: the 6 minutes, less a margin
MIN_LEFT = 15.0  # a check that would get less than this is skipped instead


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
    """Every check in order, each within min(its timeout, what is left of the budget)."""
    results = []
    for name, timeout, check in CHECKS:
        if only and name not in only:
            continue
        left = budget_end - time.monotonic()
        if left < MIN_LEFT:
            result = Result(
                name=name, status=Status.SKIP, seconds=0.0, detail="the time budget is spent"
            )
        else:
            folder = work / name
            folder.mkdir()
            result = run_one(
                name,
                check,
                Context(
                    python=python,
                    gpus=tuple(gpus),
                    work=folder,
                    deadline=time.monotonic() + min(timeout, left),
                ),
                cut=f"its {timeout:.0f} s timeout" if timeout <= left else "the time budget",
            )
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
    parser.add_argument("--budget", type=float, default=BUDGET, help="seconds for everything")
    parser.add_argument("--only", default="", help="comma-separated check names")
    args = parser.parse_args(argv)
    only = [name for name in args.only.split(",") if name]
    unknown = sorted(set(only) - {name for name, _, _ in CHECKS})
    if unknown:
        known = ", ".join(name for name, _, _ in CHECKS)
        say(f"gpu acceptance: no check named {', '.join(unknown)} (checks: {known})")
        return 2
    started = time.monotonic()
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
    say(f"gpu acceptance: {reason}; python {python_version()}; budget {args.budget:.0f} s")
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
        results += run_checks(sys.executable, gpus, work, started + args.budget, only)
        write_outputs(args.out, results, facts, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say("")
    say(render_summary(results))
    say(f"summary: {args.out / 'summary.json'}; logs: {args.out / 'artifacts.tar.gz'}")
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
