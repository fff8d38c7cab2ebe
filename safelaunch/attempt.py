"""One attempt, start to report: supervise -> outcome -> diagnosis -> summary and report.json.

The job's attempts (launch.py) and the isolation reruns (isolation/driver.py) run through
the same run_attempt. A rerun (its plan has `rerun` set) differs only in what follows
it: its verdict is said instead of a summary, and its report stands alone (no restarts).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from safelaunch.config import LaunchConfig
from safelaunch.console import Console, Level
from safelaunch.interpreter import paused
from safelaunch.plan import LaunchPlan, RunIdentity
from safelaunch.preflight import PreflightReport
from safelaunch.rundir import report_file
from safelaunch.rundir.writing import shown_path, write_file
from safelaunch.supervisor import PeerWatch, SignalReceiver
from safelaunch.supervisor.loop import supervise

if TYPE_CHECKING:  # loaded once the ranks run (JUDGING); multi-node only (Membership)
    from safelaunch.diagnose import Diagnosis
    from safelaunch.diagnose.signatures import Signature
    from safelaunch.outcome import Outcome
    from safelaunch.rendezvous.membership import Membership
    from safelaunch.restarts.rule import AttemptFacts, Decision

# What judges and reports an attempt: outcome, diagnosis, report, and the run's pages
# (view: report.html, written at the end) (~20 ms of imports, most of it creating their
# dataclasses). Loaded while the first attempt's ranks start rather than before they do
# or after they end: the import then overlaps their start instead of delaying the launch
# (launch cost, bench/vs_torchrun.py); a multi-node launch loads them earlier, while
# torch's rendezvous waits for the other nodes (launch._load_attempt).
# tests/test_import_cost.py keeps them off the path to the first spawn.
JUDGING = (
    "safelaunch.outcome",
    "safelaunch.diagnose",
    "safelaunch.report",
    "safelaunch.report_json",
    "safelaunch.view",
)


def load_judging() -> None:
    """Import JUDGING (a no-op once done): run_attempt's functions below come from there.

    The collector is paused meanwhile, as entry.py pauses it for the launcher's own
    imports: creating classes sets off collections that find nothing to free.
    """
    with paused():
        for name in JUDGING:
            importlib.import_module(name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """What every attempt and rerun of one run shares."""

    config: LaunchConfig
    preflight: PreflightReport
    identity: RunIdentity
    receiver: SignalReceiver
    console: Console
    keeper_pid: int
    table: Sequence[Signature] | None  # the user's --signatures and the built-in ones; None:
    # the built-in ones alone (loaded with diagnosis, once the ranks run)
    membership: Membership | None = None  # multi-node only


@dataclass(frozen=True, slots=True, kw_only=True)
class Concluded:
    """An attempt judged: its outcome, diagnosis, report.json content and exit code."""

    outcome: Outcome
    diagnosis: Diagnosis
    report: dict[str, Any]
    code: int
    exit_line: str | None  # "exit code N ...": printed last, after any rerun
    restart: Decision | None = None  # the restart policy's, after a failure or hang


def run_attempt(
    session: Session,
    plan: LaunchPlan,
    *,
    logs_ok: bool,
    peers: PeerWatch | None = None,
    history: list[dict[str, Any]] | None = None,
    failures: list[AttemptFacts] | None = None,
) -> Concluded:
    """Run the attempt (or rerun) to its end, judge it, diagnose it, report it.

    `history`: the job's earlier attempts for report.json; this one is appended to it.
    `failures`: the job's earlier failed attempts for the restart policy (None: no policy,
    a rerun or a multi-node job); this one is appended to it when it failed or hung.
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
        while_ranks_start=load_judging,
    )
    from safelaunch.outcome import outcome_of  # loaded by now: JUDGING
    from safelaunch.report import exit_code
    from safelaunch.report_json import report_record, write_report

    outcome = outcome_of(record)
    diagnosis = _diagnosed(session, outcome, plan)
    exit_line = None
    if plan.rerun is None:  # a rerun's verdict is said by the driver instead
        exit_line = _say_summary(session, outcome, diagnosis, logs_ok)
    max_restarts = session.config.max_restarts if plan.rerun is None else 0
    report = report_record(outcome, diagnosis, plan.run.run_id, max_restarts, history)
    code = exit_code(outcome, diagnosis)
    restart = None
    report["restarts"] = None
    if failures is not None and outcome.retryable:
        restart = _restart_decision(session, outcome, diagnosis, plan, failures)
        if restart.code is not None:
            exit_line = _recoded(exit_line, restart.code, code)
            code = restart.code
        report["restarts"] = restart.record(session.config.restart_policy)
        report["exit_code"] = report["attempts"][-1]["exit_code"] = code
    written = write_report(report_file.report(outcome.attempt_dir), report)
    if not written and plan.rerun is None:  # a rerun's verdict is in the job's report
        # A full disk (or a log directory gone): the report is not lost, it is printed.
        session.console.say(
            f"cannot write {shown_path(report_file.report(outcome.attempt_dir))}; the report: "
            + json.dumps(report, default=str),
            Level.WARNING,
        )
    if history is not None:
        history.append(report["attempts"][-1])
    return Concluded(
        outcome=outcome,
        diagnosis=diagnosis,
        report=report,
        code=code,
        exit_line=exit_line,
        restart=restart,
    )


def _diagnosed(session: Session, outcome: Outcome, plan: LaunchPlan) -> Diagnosis:
    """The diagnosis; when diagnosing raises, the outcome undiagnosed, said as such.

    Diagnosis reads files the ranks wrote, in shapes nobody can list in advance. A bug or
    an unforeseen file there must not cost the job its exit code and report (a report on
    every exit path): the first failed rank is then the root cause, with no class.
    """
    from safelaunch.diagnose import Diagnosis, diagnose
    from safelaunch.diagnose.signatures import SIGNATURES
    from safelaunch.vocab import UNKNOWN

    table = SIGNATURES if session.table is None else session.table
    try:
        return diagnose(outcome, table, plan.heartbeat_dir)
    except Exception as exc:  # the job's verdict outlives a bug of ours
        session.console.say(
            f"internal error while diagnosing: {type(exc).__name__}: {str(exc)[:200]}; "
            "this is a bug in safelaunch, please report it. What follows is undiagnosed: "
            "the first rank that failed stands as the root cause",
            Level.WARNING,
        )
        first = outcome.first_failure
        return Diagnosis(root_cause=first, error=None, klass=UNKNOWN if first else None)


def _say_summary(
    session: Session, outcome: Outcome, diagnosis: Diagnosis, logs_ok: bool
) -> str | None:
    """The summary, with what lint saw coming; its "exit code" line returned, not said."""
    from safelaunch.lint import related
    from safelaunch.lint.findings_text import lint_match
    from safelaunch.report import render_summary, split_exit_line

    summary, exit_line = split_exit_line(render_summary(outcome, diagnosis, logs_ok))
    lint, script = session.preflight.lint, session.config.training_script
    if exit_line is not None and lint:  # a failure or hang: did lint see it coming?
        signature = diagnosis.signature.id if diagnosis.signature else None
        summary += lint_match(script, related(lint, diagnosis.klass, signature))
    session.console.say(summary)
    return exit_line


def _restart_decision(
    session: Session,
    outcome: Outcome,
    diagnosis: Diagnosis,
    plan: LaunchPlan,
    failures: list[AttemptFacts],
) -> Decision:
    """The restart policy on this failed attempt, said when it ends the restarts early."""
    from safelaunch.restarts.facts import facts_of
    from safelaunch.restarts.rule import Why, decide

    config = session.config
    failures.append(facts_of(outcome, diagnosis, plan.heartbeat_dir))
    decision = decide(config.restart_policy, failures, config.max_restarts)
    if decision.restart or not config.max_restarts:
        return decision
    if decision.why == Why.SPENT:
        said = f"restarts: {decision.reason}, {decision.persistence}"
    else:
        left = config.max_restarts - outcome.attempt
        said = (
            f"restarts stopped ({left} of {config.max_restarts} left): {decision.reason}; "
            "to restart anyway: --restart-policy always"
        )
    session.console.say(said)
    return decision


def _recoded(exit_line: str | None, code: int, own: int) -> str | None:
    """The closing line with the restart policy's code for a scheduler in place of `own`."""
    from safelaunch import exitcodes

    meaning = "do not requeue" if code == exitcodes.NO_REQUEUE else "requeue may help"
    _, _, logs = (exit_line or "").partition("; logs: ")
    return f"exit code {code} ({meaning}; the root cause's own code: {own})" + (
        f"; logs: {logs}" if logs else ""
    )
