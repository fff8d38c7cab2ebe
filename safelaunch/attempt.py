"""One attempt, start to report: supervise -> outcome -> diagnosis -> summary and report.json.

The job's attempts (launch.py) and the isolation reruns (isolation/driver.py) run through
the same run_attempt. A rerun (its plan has `rerun` set) differs only in what follows
it: its verdict is said instead of a summary, and its report stands alone (no restarts).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from safelaunch.config import LaunchConfig
from safelaunch.console import Console
from safelaunch.diagnose import Diagnosis, diagnose
from safelaunch.diagnose.signatures import Signature
from safelaunch.lint import related
from safelaunch.lint.report import lint_match
from safelaunch.outcome import Outcome, outcome_of
from safelaunch.plan import LaunchPlan, RunIdentity
from safelaunch.preflight import PreflightReport
from safelaunch.report import (
    exit_code,
    render_summary,
    report_record,
    shown_path,
    split_exit_line,
    write_file,
    write_report,
)
from safelaunch.supervisor import PeerWatch, SignalReceiver, supervise

if TYPE_CHECKING:  # multi-node only
    from safelaunch.rendezvous.membership import Membership


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """What every attempt and rerun of one run shares."""

    config: LaunchConfig
    preflight: PreflightReport
    identity: RunIdentity
    receiver: SignalReceiver
    console: Console
    keeper_pid: int
    table: Sequence[Signature]
    membership: Membership | None = None  # multi-node only


@dataclass(frozen=True, slots=True, kw_only=True)
class Concluded:
    """An attempt judged: its outcome, diagnosis, report.json content and exit code."""

    outcome: Outcome
    diagnosis: Diagnosis
    report: dict[str, Any]
    code: int
    exit_line: str | None  # "exit code N ...": printed last, after any rerun


def run_attempt(
    session: Session,
    plan: LaunchPlan,
    *,
    logs_ok: bool,
    peers: PeerWatch | None = None,
    history: list[dict[str, Any]] | None = None,
) -> Concluded:
    """Run the attempt (or rerun) to its end, judge it, diagnose it, report it.

    `history`: the job's earlier attempts for report.json; this one is appended to it.
    The summary's closing "exit code" line is held back: the caller prints it last.
    """
    record = supervise(
        plan,
        session.console,
        session.receiver,
        logs_ok=logs_ok,
        keeper_pid=session.keeper_pid,
        peers=peers,
        write_file=write_file,
    )
    outcome = outcome_of(record)
    diagnosis = diagnose(outcome, session.table, plan.heartbeat_dir)
    exit_line = None
    if plan.rerun is None:  # a rerun's verdict is said by the driver instead
        exit_line = _say_summary(session, outcome, diagnosis)
    max_restarts = session.config.max_restarts if plan.rerun is None else 0
    report = report_record(outcome, diagnosis, plan.run.run_id, max_restarts, history)
    written = write_report(outcome.attempt_dir / "report.json", report)
    if not written and plan.rerun is None:  # a rerun's verdict is in the job's report
        # A full disk (or a log directory gone): the report is not lost, it is printed.
        session.console.say(
            f"cannot write {shown_path(outcome.attempt_dir / 'report.json')}; the report: "
            + json.dumps(report, default=str),
            "warning",
        )
    if history is not None:
        history.append(report["attempts"][-1])
    return Concluded(
        outcome=outcome,
        diagnosis=diagnosis,
        report=report,
        code=exit_code(outcome, diagnosis),
        exit_line=exit_line,
    )


def _say_summary(session: Session, outcome: Outcome, diagnosis: Diagnosis) -> str | None:
    """The summary, with what lint saw coming; its "exit code" line returned, not said."""
    summary, exit_line = split_exit_line(render_summary(outcome, diagnosis))
    lint, script = session.preflight.lint, session.config.training_script
    if exit_line is not None and lint:  # a failure or hang: did lint see it coming?
        signature = diagnosis.signature.id if diagnosis.signature else None
        summary += lint_match(script, related(lint, diagnosis.klass, signature))
    session.console.say(summary)
    return exit_line
