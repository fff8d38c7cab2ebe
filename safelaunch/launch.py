"""The orchestrator: preflight once, then attempts until one succeeds or restarts run out.

A restart is data moving forward: a new plan for attempt n+1, a new attempt
directory; no stage calls back into an earlier one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safelaunch import exitcodes
from safelaunch.config import LaunchConfig
from safelaunch.console import Console
from safelaunch.diagnose import Diagnosis, diagnose, signatures
from safelaunch.diagnose.isolation import (
    CommUse,
    Verdict,
    failure_point,
    gloo_rerun,
    gloo_verdict,
    read_comm,
    should_isolate,
    single_rerun,
    single_verdict,
    transport_reruns,
    transport_verdict,
)
from safelaunch.diagnose.signatures import Signature
from safelaunch.outcome import INTERRUPTED, Outcome, outcome_of, signal_name
from safelaunch.plan import LaunchPlan, Rerun, RunIdentity, Timebox, build_plan
from safelaunch.preflight import PreflightReport, run_preflight
from safelaunch.report import (
    exit_code,
    isolation_record,
    render_summary,
    render_verdict,
    report_record,
    shown_path,
    write_report,
)
from safelaunch.supervisor import (
    AttemptRecord,
    Keeper,
    SignalReceiver,
    become_subreaper,
    open_attempt_logs,
    supervise,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Concluded:
    """An attempt judged: its outcome, diagnosis, report.json content and exit code."""

    outcome: Outcome
    diagnosis: Diagnosis
    report: dict[str, Any]
    code: int


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


def new_run(config: LaunchConfig) -> RunIdentity:
    """A fresh run id (sortable by start time), its directory and its process token."""
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(3).hex()}"
    return RunIdentity(
        run_id=run_id,
        run_dir=config.log_dir.resolve() / run_id,
        token=os.urandom(16).hex(),
        private_dir=Path(tempfile.mkdtemp(prefix=f"safelaunch-{run_id}-")),  # mode 0700
        launcher_pid=os.getpid(),
    )


def point_latest(log_dir: Path, run_id: str) -> None:
    """<log-dir>/latest -> this run, for the 3 a.m. `cd safelaunch_logs/latest`."""
    with contextlib.suppress(OSError):
        log_dir.mkdir(parents=True, exist_ok=True)
        temporary = log_dir / f".latest-{run_id}"
        temporary.symlink_to(run_id)
        os.replace(temporary, log_dir / "latest")


def banner(config: LaunchConfig, preflight: PreflightReport, plan: LaunchPlan) -> str:
    """What is about to run, and every variable safelaunch chose for the ranks."""
    where = shown_path(plan.attempt_dir)
    if plan.attempt:
        return f"restart {plan.attempt} of {config.max_restarts}: logs in {where}"
    last = preflight.nproc - 1
    lines = [
        f"{preflight.nproc} rank(s) ({preflight.nproc_reason}), "
        f"MASTER_ADDR={preflight.master_addr} MASTER_PORT={preflight.master_port.port}",
        f"logs: {where}/rank{{0..{last}}}.log" if last else f"logs: {where}/rank0.log",
    ]
    lines.extend(preflight.gpu_lines)
    if plan.env_choices:
        run_dir = str(plan.run.run_dir / "attempt_{n}")
        chosen = ", ".join(
            f"{c.name}={c.value.replace(run_dir, '<attempt dir>')}" for c in plan.env_choices
        )
        lines.append(
            f"set for the ranks ({config.debug_profile} profile; yours are never changed): {chosen}"
        )
    lines.extend(f"note: {notice}" for notice in config.notices)
    return "\n".join(lines)


def run(config: LaunchConfig, console: Console) -> int:
    """Launch the job; return the exit code (see exitcodes)."""
    table = signatures.load(config.signatures_file)  # a bad file stops us before anything starts
    preflight = run_preflight(config)
    identity = new_run(config)
    receiver = SignalReceiver(config.signals_to_handle)
    keeper: Keeper | None = None
    try:
        become_subreaper()
        keeper = Keeper.start(identity.token)  # before any thread exists
        receiver.install()
        point_latest(config.log_dir, identity.run_id)
        session = Session(
            config=config,
            preflight=preflight,
            identity=identity,
            receiver=receiver,
            console=console,
            keeper_pid=keeper.pid,
            table=table,
        )
        return _attempts(session)
    finally:
        receiver.restore()
        if keeper is not None:
            keeper.stop()
        preflight.master_port.release()
        shutil.rmtree(identity.private_dir, ignore_errors=True)


def _attempts(session: Session) -> int:
    config, preflight, console = session.config, session.preflight, session.console
    receiver = session.receiver
    history: list[dict[str, Any]] = []  # every attempt's status, for report.json
    for attempt in range(config.max_restarts + 1):
        plan = build_plan(config, preflight, session.identity, attempt)
        logs_ok = open_attempt_logs(plan, console)
        console.say(banner(config, preflight, plan))
        if attempt == 0 and preflight.warnings:
            console.say("\n".join(preflight.warnings), "warning")
        try:
            record = supervise(
                plan, console, receiver, logs_ok=logs_ok, keeper_pid=session.keeper_pid
            )
            concluded = _conclude(record, console, config.max_restarts, session.table, history)
        finally:
            console.close_log()
        if not concluded.outcome.retryable or attempt == config.max_restarts:
            if concluded.outcome.retryable:
                _isolate(session, plan, concluded)
            return concluded.code
        late = receiver.take()
        if late:  # a signal between attempts: do not start another
            console.say(f"received {signal_name(late[0])} before the restart: stopping")
            return exitcodes.for_signal(late[0])
    raise AssertionError("unreachable: the last attempt always returns")


def _conclude(
    record: AttemptRecord,
    console: Console,
    max_restarts: int,
    table: Sequence[Signature],
    history: list[dict[str, Any]],
) -> Concluded:
    """Judge, diagnose, report (console, launcher.log, report.json); the attempt's exit code."""
    outcome = outcome_of(record)
    diagnosis = diagnose(outcome, table)
    console.say(render_summary(outcome, diagnosis))
    report = report_record(outcome, diagnosis, record.plan.run.run_id, max_restarts, history)
    write_report(outcome.attempt_dir / "report.json", report)
    history.append(report["attempts"][-1])
    return Concluded(
        outcome=outcome, diagnosis=diagnosis, report=report, code=exit_code(outcome, diagnosis)
    )


def _isolate(session: Session, plan: LaunchPlan, job: Concluded) -> None:
    """The reruns after the last attempt failed or hung; their verdicts join its report.

    They never change the exit code: that is the job's. A signal stops them.
    """
    config, console = session.config, session.console
    decision = should_isolate(config.isolate, job.outcome, job.diagnosis)
    timebox = failure_point(plan, job.outcome, config.isolate_timeout)
    job_comm = read_comm(job.outcome.attempt_dir)
    reruns: list[Rerun] = []
    notes: list[str] = []
    if decision.run:
        rerun, checks = gloo_rerun(timebox, job_comm, config.environ)
        reruns.append(rerun)
        notes.append(checks)
    if config.isolate_single and len(plan.workers) > 1:
        reruns.append(single_rerun(timebox))
    if config.isolate_nccl:
        transports, skipped = transport_reruns(timebox, config.environ)
        reruns.extend(transports)
        notes.extend(skipped)
    if not decision.run:
        console.say(f"isolation: no Gloo rerun: {decision.reason}")
    verdicts: list[Verdict] = []
    for rerun in reruns:
        late = session.receiver.take()
        if late:
            notes.append(f"stopped by {signal_name(late[0])} before the rerun {rerun.purpose}")
            break
        verdict = _rerun(session, plan, job, rerun, job_comm)
        verdicts.append(verdict)
        if verdict.ran.status == INTERRUPTED:
            notes.append(f"interrupted during the rerun {rerun.purpose}: later reruns skipped")
            break
    job.report["isolation"] = isolation_record(decision, verdicts, notes)
    write_report(job.outcome.attempt_dir / "report.json", job.report)


def _rerun(
    session: Session, plan: LaunchPlan, job: Concluded, rerun: Rerun, job_comm: CommUse
) -> Verdict:
    """One isolation rerun, start to verdict, in its own directory with its own report.json."""
    config, console = session.config, session.console
    rerun_plan = build_plan(config, session.preflight, session.identity, plan.attempt, rerun)
    logs_ok = open_attempt_logs(rerun_plan, console)
    console.say(
        f"isolation: rerunning the job {rerun.purpose} to tell where the fault is; "
        f"{_until(rerun.timebox)}; logs: "
        f"{shown_path(rerun_plan.attempt_dir)}"
    )
    try:
        record = supervise(
            rerun_plan,
            console,
            session.receiver,
            logs_ok=logs_ok,
            keeper_pid=session.keeper_pid,
        )
        outcome = outcome_of(record)
        diagnosis = diagnose(outcome, session.table)
        if rerun.gloo:
            verdict = gloo_verdict(job.outcome, job.diagnosis, job_comm, rerun, outcome, diagnosis)
        elif rerun.nproc == 1:
            verdict = single_verdict(job.outcome, job.diagnosis, rerun, outcome, diagnosis)
        else:
            verdict = transport_verdict(rerun, outcome, diagnosis)
        console.say(render_verdict(verdict))
        report = report_record(outcome, diagnosis, session.identity.run_id, 0)
        write_report(outcome.attempt_dir / "report.json", report)
    finally:
        console.close_log()
    return verdict


def _until(box: Timebox) -> str:
    if box.past_step is not None:
        point = f"it stops once every rank is past step {box.past_step}"
    elif box.past_seq is not None:
        point = f"it stops once every rank is past collective #{box.past_seq}"
    else:
        point = f"it stops after {box.after_s:g} s without failing"
    return f"{point} (at most {box.cap_s:g} s)"
