"""The verdicts for people (the summary) and for programs (report.json's `isolation`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from safelaunch.isolation.policy import Decision
from safelaunch.isolation.verdicts import Verdict
from safelaunch.rundir.writing import shown_path


def render_verdict(verdict: Verdict) -> str:
    """What one isolation rerun proves, and where its logs are."""
    from safelaunch.cause import next_lines  # a failure's: a job that succeeds never loads it

    ran = verdict.ran
    lines = [f"ISOLATION {ran.purpose} ({ran.duration:.1f} s): {verdict.kind.value}"]
    lines.append(f"  {verdict.headline}")
    lines.extend(f"  {detail}" for detail in verdict.details)
    lines.extend(next_lines(verdict.next_steps[:5]))
    lines.append(f"  logs:  {shown_path(ran.attempt_dir)}")
    return "\n".join(lines)


def isolation_record(
    decision: Decision, verdicts: Sequence[Verdict], notes: Sequence[str]
) -> dict[str, Any]:
    """report.json's `isolation`: whether the Gloo rerun ran and why, and every rerun's verdict."""
    return {
        "gloo_rerun": decision.run,
        "reason": decision.reason,
        "ending": decision.ending.name.lower() if decision.ending else None,
        "backend": decision.backend.name.lower() if decision.backend else None,
        "reruns": [
            {
                "name": v.ran.name,
                "purpose": v.ran.purpose,
                "verdict": v.kind.value,
                "summary": v.headline,
                "details": list(v.details),
                "next_steps": list(v.next_steps),
                "status": v.ran.status,
                "duration_s": round(v.ran.duration, 3),
                "dir": str(v.ran.attempt_dir),
                "signature": v.signature,
                "collective_mismatch": v.mismatch,
            }
            for v in verdicts
        ],
        "notes": list(notes),
    }
