"""Report: the end-of-run summary, root cause first."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from safelaunch.diagnose import Diagnosis
from safelaunch.diagnose.hang import HangAnalysis, Whereabouts
from safelaunch.outcome import FAILED, HUNG, STOPPED, SUCCEEDED, Outcome, RankResult, signal_name


def shown_path(path: Path) -> str:
    """Relative to the working directory when that is shorter."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return relative if len(relative) < len(str(path)) else str(path)


def _rank_state(result: RankResult) -> str:
    if result.state == SUCCEEDED:
        return "succeeded"
    if result.state == STOPPED:
        if result.signal is not None:
            return f"stopped by safelaunch ({signal_name(result.signal)})"
        return f"stopped by safelaunch, then exited with code {result.exit_code}"
    return result.how_it_ended()


def _group_lines(ranks: list[RankResult]) -> list[str]:
    """One line per rank, ranks with the same ending folded into one line."""
    groups: dict[str, list[int]] = {}
    for result in ranks:
        groups.setdefault(_rank_state(result), []).append(result.rank)
    lines = []
    for state, members in groups.items():
        label = f"rank {members[0]}" if len(members) == 1 else f"ranks {_ranges(members)}"
        lines.append(f"  {label}: {state}")
    return lines


def _ranges(numbers: list[int]) -> str:
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(
        str(a) if a == b else f"{a},{b}" if b == a + 1 else f"{a}-{b}" for a, b in spans
    )


def _whereabouts(group: Whereabouts, culprits: tuple[int, ...]) -> str:
    label = (
        f"rank {group.ranks[0]}" if len(group.ranks) == 1 else f"ranks {_ranges(list(group.ranks))}"
    )
    one = len(group.ranks) == 1
    verb = ("waits in" if one else "wait in") if group.waiting else ("is in" if one else "are in")
    details = [group.location] if group.location else []
    if group.seqs:
        seqs = "/".join(f"#{s}" for s in group.seqs)
        details.append(f"collective {seqs}")
    line = f"  {label} {verb} {group.activity}" + (f" ({', '.join(details)})" if details else "")
    if group.frozen:
        line += f"; {group.frozen}"
    if set(group.ranks) <= set(culprits):
        line += "  <- the odd one out"
    return line


def render_hang(outcome: Outcome, hang: HangAnalysis, logs: str, attempt: str) -> str:
    """Where every rank is, the odd ones out first named, and where the stacks are."""
    lines = [
        f"HUNG{attempt}: no rank made progress for {hang.stuck_for:.1f} s "
        f"(--hang-timeout {hang.timeout:g})"
    ]
    lines.extend(_whereabouts(group, hang.culprits) for group in hang.groups)
    lines.extend(f"  rank {rank} had already ended: {how}" for rank, how in hang.exited)
    if hang.culprits:
        who = ",".join(str(r) for r in hang.culprits)
        lines.append(f"  likely culprit: rank {who}: {hang.reason}")
    else:
        lines.append(f"  {hang.reason}")
    if hang.stacks_dir is not None:
        lines.append(f"  stacks: {shown_path(hang.stacks_dir)}/ (every thread of every rank)")
    lines.append(f"exit code {outcome.exit_code} (hang); logs: {logs}")
    return "\n".join(lines)


def render_summary(outcome: Outcome, diagnosis: Diagnosis) -> str:
    """A few lines on success; on failure the root cause, its error, where, and its log."""
    attempt = f" (attempt {outcome.attempt})" if outcome.attempt else ""
    logs = shown_path(outcome.run_dir)
    notes = []
    if outcome.strays_ended:
        notes.append(f"ended {outcome.strays_ended} leftover process(es) the ranks had started")
    notes.extend(outcome.log_problems)
    if outcome.status == SUCCEEDED:
        head = f"all {len(outcome.ranks)} ranks succeeded in {outcome.duration:.1f} s{attempt}"
        return "\n".join([head, *notes, f"logs: {logs}"])
    if outcome.status == HUNG and diagnosis.hang is not None:
        return render_hang(outcome, diagnosis.hang, logs, attempt)
    if outcome.status == FAILED and diagnosis.root_cause is not None:
        cause = diagnosis.root_cause
        lines = [
            f"FAILED{attempt}: rank {cause.rank} {cause.how_it_ended()} "
            f"after {cause.ended_after:.1f} s (root cause: the first rank to fail)"
        ]
        if diagnosis.error is not None:
            lines.append(f"  error: {diagnosis.error.line}")
            if diagnosis.error.location:
                lines.append(f"  at:    {diagnosis.error.location}")
        lines.append(f"  log:   {shown_path(cause.log_path)}")
        others = [r for r in outcome.ranks if r.rank != cause.rank]
        lines.extend(_group_lines(others))
        lines.extend(notes)
        lines.append(f"exit code {outcome.exit_code} (rank {cause.rank}'s own code); logs: {logs}")
        return "\n".join(lines)
    name = signal_name(outcome.interrupt_signal or signal.SIGTERM)
    lines = [f"interrupted by {name} after {outcome.duration:.1f} s{attempt}"]
    lines.extend(_group_lines(list(outcome.ranks)))
    lines.extend(notes)
    lines.append(f"exit code {outcome.exit_code}; logs: {logs}")
    return "\n".join(lines)
