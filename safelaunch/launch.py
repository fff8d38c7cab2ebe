"""The orchestrator: preflight once, then attempts until one succeeds or restarts run out.

A restart is data moving forward: a new plan for attempt n+1, a new attempt
directory; no stage calls back into an earlier one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safelaunch import exitcodes, multinode
from safelaunch.config import LaunchConfig
from safelaunch.console import Console
from safelaunch.diagnose import Diagnosis, diagnose, user_signatures
from safelaunch.diagnose.signatures import Signature
from safelaunch.lint import related
from safelaunch.lint.report import lint_banner, lint_match
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
    split_exit_line,
    write_file,
    write_report,
)
from safelaunch.slurm import in_step
from safelaunch.supervisor import (
    AttemptRecord,
    Keeper,
    SignalReceiver,
    become_subreaper,
    open_attempt_logs,
    supervise,
)

if TYPE_CHECKING:  # imported where used: a clean single-node launch needs none of them
    from safelaunch.diagnose.isolation import CommUse, Verdict
    from safelaunch.rendezvous.membership import Membership


@dataclass(frozen=True, slots=True, kw_only=True)
class Concluded:
    """An attempt judged: its outcome, diagnosis, report.json content and exit code."""

    outcome: Outcome
    diagnosis: Diagnosis
    report: dict[str, Any]
    code: int
    exit_line: str | None  # "exit code N ...": printed last, after any rerun


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
    first, last = plan.workers[0].rank, plan.workers[-1].rank
    env = plan.workers[0].env
    lines = [
        f"{preflight.nproc} rank(s) ({preflight.nproc_reason}), "
        f"MASTER_ADDR={env['MASTER_ADDR']} MASTER_PORT={env['MASTER_PORT']}",
        f"logs: {where}/rank{{{first}..{last}}}.log"
        if last > first
        else f"logs: {where}/rank{first}.log",
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
    table = user_signatures.load(
        config.signatures_file
    )  # a bad file stops us before anything starts
    preflight = run_preflight(config)
    identity = new_run(config)
    receiver = SignalReceiver(config.signals_to_handle, pass_on=not in_step(config.environ))
    keeper: Keeper | None = None
    membership: Membership | None = None
    try:
        become_subreaper()
        keeper = Keeper.start(identity.token, str(identity.private_dir))  # before any thread
        if config.origins:
            console.say("from SLURM (flags win): " + ", ".join(config.origins))
        if config.nnodes[1] > 1:
            membership = multinode.join(config, preflight, console)
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
            membership=membership,
        )
        return _attempts(session)
    finally:
        _views(identity.run_dir)
        if membership is not None:
            membership.leave(timeout=multinode.LEAVE_TIMEOUT)
        receiver.settle()  # the code is decided: a late SIGTERM must not replace it
        if keeper is not None:
            keeper.stop()
        preflight.master_port.release()
        shutil.rmtree(identity.private_dir, ignore_errors=True)


def _views(run_dir: Path) -> None:
    """report.html and timeline.json for the whole run; never a reason to fail it."""
    if not (run_dir / "attempt_0" / "report.json").exists():
        return  # nothing ran (stopped before the first attempt)
    from safelaunch.view import write_views

    with contextlib.suppress(Exception):
        write_views(run_dir, write_file)


def _attempts(session: Session) -> int:
    config, preflight, console = session.config, session.preflight, session.console
    receiver, membership = session.receiver, session.membership
    history: list[dict[str, Any]] = []  # every attempt's status, for report.json
    for attempt in range(config.max_restarts + 1):
        late = receiver.take() if attempt else []
        if membership is not None:  # every node starts the attempt, or none does
            stopping, missing = membership.start_attempt(attempt, not late, multinode.START_TIMEOUT)
            if stopping or missing:
                return multinode.not_starting(console, membership, attempt, stopping, missing, late)
        if late:  # a signal between attempts: do not start another
            console.say(f"received {signal_name(late[0])} before the restart: stopping")
            return exitcodes.for_signal(late[0])
        placement = (
            membership.placement_for(attempt, multinode.START_TIMEOUT)
            if membership is not None
            else None
        )
        plan = build_plan(config, preflight, session.identity, attempt, placement=placement)
        logs_ok = open_attempt_logs(plan, console)
        console.say(banner(config, preflight, plan))
        if attempt == 0 and preflight.warnings:
            console.say("\n".join(preflight.warnings), "warning")
        if attempt == 0 and any(f.severity != "hint" for f in preflight.lint):
            console.say(lint_banner(config.training_script, preflight.lint), "warning")
        try:
            record = supervise(
                plan,
                console,
                receiver,
                logs_ok=logs_ok,
                keeper_pid=session.keeper_pid,
                peers=membership.watch(attempt) if membership is not None else None,
                write_file=write_file,
            )
            concluded = _conclude(record, session, history)
            closing = concluded.exit_line
            if membership is not None:
                if closing is not None:  # this node's own; the job's verdict comes last
                    console.say(closing)
                job = multinode.conclude(
                    membership,
                    outcome=concluded.outcome,
                    diagnosis=concluded.diagnosis,
                    report=concluded.report,
                    console=console,
                    receiver=receiver,
                    shutdown_timeout=config.shutdown_timeout,
                )
                retry, code = job.retryable, job.code
                closing = f"exit code {job.code} on every node" if job.lines else None
            else:
                retry, code = concluded.outcome.retryable, concluded.code
            if retry and attempt < config.max_restarts and closing is not None:
                console.say(closing)  # a restart follows: this attempt's code, in its log
        finally:
            console.close_log()
        if not retry or attempt == config.max_restarts:
            if retry and membership is None:
                _isolate(session, plan, concluded)
            elif retry:
                console.say("isolation: no Gloo rerun: not available for multi-node jobs yet")
            if closing is not None:  # the last line printed, after any rerun
                _say_in_attempt_log(console, plan, closing)
            return code
    raise AssertionError("unreachable: the last attempt always returns")


def _say_in_attempt_log(console: Console, plan: LaunchPlan, text: str) -> None:
    """Say it, and append it to the attempt's launcher.log (reruns had logs of their own)."""
    with contextlib.suppress(OSError):
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        console.attach_log(os.open(plan.attempt_dir / "launcher.log", flags))
    try:
        console.say(text)
    finally:
        console.close_log()


def _conclude(record: AttemptRecord, session: Session, history: list[dict[str, Any]]) -> Concluded:
    """Judge, diagnose, report (console, launcher.log, report.json); the attempt's exit code.

    The summary's closing "exit code" line is held back: the caller prints it last.
    """
    outcome = outcome_of(record)
    diagnosis = diagnose(outcome, session.table, record.plan.heartbeat_dir)
    summary, exit_line = split_exit_line(render_summary(outcome, diagnosis))
    lint, script = session.preflight.lint, session.config.training_script
    if exit_line is not None and lint:  # a failure or hang: did lint see it coming?
        signature = diagnosis.signature.id if diagnosis.signature else None
        summary += lint_match(script, related(lint, diagnosis.klass, signature))
    session.console.say(summary)
    max_restarts = session.config.max_restarts
    report = report_record(outcome, diagnosis, record.plan.run.run_id, max_restarts, history)
    if not write_report(outcome.attempt_dir / "report.json", report):
        # A full disk (or a log directory gone): the report is not lost, it is printed.
        session.console.say(
            f"cannot write {shown_path(outcome.attempt_dir / 'report.json')}; the report: "
            + json.dumps(report, default=str),
            "warning",
        )
    history.append(report["attempts"][-1])
    return Concluded(
        outcome=outcome,
        diagnosis=diagnosis,
        report=report,
        code=exit_code(outcome, diagnosis),
        exit_line=exit_line,
    )


def _isolate(session: Session, plan: LaunchPlan, job: Concluded) -> None:
    """The reruns after the last attempt failed or hung; their verdicts join its report.

    They never change the exit code: that is the job's. A signal stops them.
    """
    from safelaunch.diagnose.isolation import (
        detail_safe,
        failure_point,
        gloo_rerun,
        read_comm,
        single_rerun,
        transport_reruns,
    )
    from safelaunch.diagnose.policy import should_isolate

    config, console = session.config, session.console
    job_comm = read_comm(job.outcome.attempt_dir)
    decision = should_isolate(
        config.isolate,
        job.outcome,
        job.diagnosis,
        job_comm.backend,
        detail_safe(job_comm, config.environ),
    )
    timebox = failure_point(plan, job.outcome, config.isolate_timeout)
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
    from safelaunch.diagnose.isolation import gloo_verdict, single_verdict, transport_verdict

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
            write_file=write_file,
        )
        outcome = outcome_of(record)
        diagnosis = diagnose(outcome, session.table, rerun_plan.heartbeat_dir)
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
