"""Report: the end-of-run summary, root cause first (report.json's record: report_json.py)."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from safelaunch.diagnose import Diagnosis, stragglers
from safelaunch.exitcodes import signal_name
from safelaunch.outcome import AttemptStatus, Outcome, RankEnding, RankResult
from safelaunch.ranktext import ranks_label
from safelaunch.rundir.writing import shown_path
from safelaunch.vocab import UNKNOWN

# What only a failure's summary uses (the root-cause block, flight records, how ranks
# left) is imported there: a job that succeeds never loads it (diagnose/__init__.py).
if TYPE_CHECKING:
    from safelaunch.diagnose.arbiter import Verdict
    from safelaunch.diagnose.signatures import Signature
    from safelaunch.flights.forensics import Forensics
    from safelaunch.hangs.analysis import HangAnalysis, Whereabouts


def _rank_state(result: RankResult) -> str:
    if result.state == RankEnding.SUCCEEDED:
        return "succeeded"
    if result.state == RankEnding.STOPPED:
        return result.stop_label()
    return result.how_it_ended()


def _group_lines(ranks: list[RankResult]) -> list[str]:
    """One line per rank, ranks with the same ending folded into one line."""
    groups: dict[str, list[int]] = {}
    for result in ranks:
        groups.setdefault(_rank_state(result), []).append(result.rank)
    return [f"  {ranks_label(members)}: {state}" for state, members in groups.items()]


def _whereabouts(group: Whereabouts, culprits: tuple[int, ...]) -> str:
    label = ranks_label(list(group.ranks))
    one = len(group.ranks) == 1
    verb = ("waits in" if one else "wait in") if group.waiting else ("is in" if one else "are in")
    details = [group.location] if group.location else []
    if group.seqs:
        seqs = "/".join(f"#{s}" for s in group.seqs)
        details.append(f"collective {seqs}")
    doing = group.children or f"{verb} {group.activity}"  # its children's place, when it waits
    line = f"  {label} {doing}" + (f" ({', '.join(details)})" if details else "")
    if group.frozen:
        line += f"; {group.frozen}"
    if group.ended:
        line += f"; {group.ended}"
    if set(group.ranks) <= set(culprits):
        line += "  <- the odd one out"
    return line


def survivor_lines(outcome: Outcome, diagnosis: Diagnosis) -> list[str]:
    """Where the ranks still alive were when the job began to fail, folded like a hang's."""
    if not diagnosis.survivors or outcome.survivors is None:
        return []
    head = f"  where the other ranks were when {outcome.survivors.after}:"
    return [head, *(f"  {_whereabouts(g, ())}" for g in diagnosis.survivors)]


def flight_lines(forensics: Forensics | None) -> list[str]:
    """The flight records' findings, indented under the verdict."""
    if forensics is None:
        return []
    from safelaunch.flights import forensics as collectives

    found = [f"  collectives: {line}" for line in collectives.lines(forensics)]
    return [*found, f"  flight records: {shown_path(forensics.directory)}/"]


def render_hang(
    outcome: Outcome,
    hang: HangAnalysis,
    logs: str,
    attempt: str,
    forensics: Forensics | None = None,
    signature: Signature | None = None,
    verdict: Verdict | None = None,
) -> str:
    """Where every rank is, the odd ones out first named, and where the stacks are."""
    lines = [
        f"HUNG{attempt}: {outcome.peer_event.shown}; where this node's ranks were:"
        if outcome.peer_event
        else f"HUNG{attempt}: no rank made progress for {hang.stuck_for:.1f} s "
        + (
            f"(--hang-timeout auto: {hang.timeout:.3g} s, {hang.deadline_why})"
            if hang.deadline_why
            else f"(--hang-timeout {hang.timeout:g})"
        )
    ]
    lines.extend(_whereabouts(group, hang.culprits) for group in hang.groups)
    lines.extend(f"  rank {rank} had already ended: {how}" for rank, how in hang.exited)
    agrees = verdict is None or set(verdict.culprits) == set(hang.culprits)
    from safelaunch.diagnose.arbiter import verdict_lines

    judged = [] if agrees and hang.culprits else verdict_lines(verdict, stacks_only=True)
    if judged:
        lines.extend(judged)
    elif hang.culprits:
        who = ",".join(str(r) for r in hang.culprits)
        lines.append(f"  likely culprit: rank {who}: {hang.reason}")
    else:
        lines.append(f"  {hang.reason}")
    if signature is not None:  # a hang whose cause is known (uneven loops: data/sampling)
        from safelaunch.cause import known_class_line, next_lines

        lines.append(known_class_line(signature.klass, signature.id, signature.meaning))
        lines.extend(next_lines(signature.next_steps))
    lines.extend(flight_lines(forensics))
    if hang.stacks_dir is not None:
        lines.append(f"  stacks: {shown_path(hang.stacks_dir)}/ (every thread of every rank)")
    lines.append(f"exit code {outcome.exit_code} (hang); logs: {logs}")
    return "\n".join(lines)


def exit_code(outcome: Outcome, diagnosis: Diagnosis) -> int:
    """The run's code: the diagnosed root cause's own when a rank failed.

    A root cause that exited 0, or that safelaunch stopped (it left early; its peers failed
    for it), gives no failure code: the first failure's code then, as torchrun would fail too.
    """
    root = diagnosis.root_cause
    if outcome.status == AttemptStatus.FAILED and root is not None:
        return (root.shell_code if root.state != RankEnding.STOPPED else 0) or outcome.exit_code
    return outcome.exit_code


def _code_line(outcome: Outcome, root: RankResult, code: int, logs: str) -> str:
    """Whose code the run exits with: the root cause's own, or the first failure's."""
    first = outcome.first_failure
    if root.state == RankEnding.STOPPED or root.shell_code != code:
        whose = f"rank {first.rank}'s, the first failure" if first is not None else "the run's"
        return (
            f"exit code {code} ({whose}: rank {root.rank} left without an error code); logs: {logs}"
        )
    return f"exit code {code} (rank {root.rank}'s own code); logs: {logs}"


def _failure_lines(
    outcome: Outcome, diagnosis: Diagnosis, cause: RankResult, attempt: str, logs_kept: bool
) -> list[str]:
    from safelaunch.cause import CauseView, cause_lines, consequence_lines
    from safelaunch.diagnose.arbiter import verdict_lines
    from safelaunch.diagnose.leaving import describe_leave, left_collectives

    leave = diagnosis.leaves.get(cause.rank)
    left = left_collectives(leave) if diagnosis.left_early else None
    ended = cause.stop_label() if cause.state == RankEnding.STOPPED else cause.how_it_ended()
    how = left or f"{ended} after {cause.ended_after:.1f} s"
    lines = [
        f"FAILED{attempt}: rank {cause.rank} {how}"
        + (" while the other ranks still communicated" if diagnosis.left_early else "")
    ]
    view = CauseView(
        klass=diagnosis.klass or UNKNOWN,
        signature=diagnosis.signature,
        error=diagnosis.error,
        evidence=diagnosis.evidence,
        last_lines=diagnosis.last_lines,
        how=cause.how_it_ended(),
        leave_lines=tuple(describe_leave(leave, diagnosis.seqs, cause.rank))
        if diagnosis.left_early
        else (),
        crashed_at_exit=diagnosis.crashed_at_exit,
        log=shown_path(cause.log_path) if logs_kept else None,  # no log: no path named
        seen=diagnosis.seen,
        nccl=diagnosis.nccl,
    )
    lines.extend(cause_lines(view))
    anchored = diagnosis.error is not None and diagnosis.error.source == "evidence"
    lines.extend(verdict_lines(diagnosis.verdict, anchored=anchored))
    followed = dict(diagnosis.consequences)
    others = [r for r in outcome.ranks if r.rank != cause.rank and r.rank not in followed]
    lines.extend(_group_lines(others))
    lines.extend(consequence_lines(diagnosis.consequences))
    lines.extend(survivor_lines(outcome, diagnosis))
    lines.extend(flight_lines(diagnosis.collectives))
    return lines


def render_summary(outcome: Outcome, diagnosis: Diagnosis, logs_kept: bool = True) -> str:
    """A few lines on success; on failure the root cause, its error, where, and its log.

    `logs_kept` False: the attempt's logs could not be written; no path is named.
    """
    attempt = f" (attempt {outcome.attempt})" if outcome.attempt else ""
    logs = shown_path(outcome.run_dir) if logs_kept else "none (they could not be written)"
    notes = [
        f"note: rank {rank} logged a non-finite loss: {line!r} (learning rate, inputs, BatchNorm)"
        for rank, line in diagnosis.non_finite
    ]
    if outcome.strays_ended:
        notes.append(f"ended {outcome.strays_ended} leftover process(es) the ranks had started")
    notes.extend(outcome.log_problems)
    straggler = stragglers.summary(diagnosis.stragglers)
    if straggler is not None:
        notes.append(straggler)
    if outcome.status == AttemptStatus.SUCCEEDED:
        head = f"all {len(outcome.ranks)} ranks succeeded in {outcome.duration:.1f} s{attempt}"
        return "\n".join([head, *notes, f"logs: {logs}"])
    if outcome.status == AttemptStatus.HUNG and diagnosis.hang is not None:
        return render_hang(
            outcome,
            diagnosis.hang,
            logs,
            attempt,
            diagnosis.collectives,
            diagnosis.signature,
            diagnosis.verdict,
        )
    if outcome.peer_event is not None and diagnosis.root_cause is None:
        lines = [f"STOPPED{attempt}: {outcome.peer_event.shown}"]
        lines.extend(_group_lines(list(outcome.ranks)))
        lines.extend(survivor_lines(outcome, diagnosis))
        lines.extend(notes)
        lines.append(f"logs: {logs}")
        return "\n".join(lines)
    if outcome.status == AttemptStatus.FAILED and diagnosis.root_cause is not None:
        lines = _failure_lines(outcome, diagnosis, diagnosis.root_cause, attempt, logs_kept)
        lines.extend(notes)
        code = exit_code(outcome, diagnosis)
        lines.append(_code_line(outcome, diagnosis.root_cause, code, logs))
        return "\n".join(lines)
    name = signal_name(outcome.interrupt_signal or signal.SIGTERM)
    lines = [f"interrupted by {name} after {outcome.duration:.1f} s{attempt}"]
    lines.extend(_group_lines(list(outcome.ranks)))
    lines.extend(notes)
    lines.append(f"exit code {outcome.exit_code}; logs: {logs}")
    return "\n".join(lines)


def split_exit_line(summary: str) -> tuple[str, str | None]:
    """The summary without its closing "exit code" line, and that line (None on success).

    The launcher prints that line last, after any isolation rerun.
    """
    body, _, last = summary.rpartition("\n")
    return (body, last) if body and last.startswith("exit code ") else (summary, None)
