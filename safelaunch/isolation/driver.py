"""The rerun driver: after the job's last attempt failed or hung, the reruns, then their verdicts.

The only part of isolation that runs anything: it reads the job's files, asks the
policy and the specs what to rerun, runs each rerun through run_attempt as the job's
attempts run, and has each judged (pure verdicts). Reruns never change the exit code,
which is the job's; a signal stops them.
"""

from __future__ import annotations

from safelaunch.attempt import Concluded, Session, run_attempt
from safelaunch.exitcodes import signal_name
from safelaunch.isolation.evidence import read_beats, read_rank_files
from safelaunch.isolation.policy import should_isolate
from safelaunch.isolation.reporting import isolation_record, render_verdict
from safelaunch.isolation.reruns import Planned, detail_safe, failure_point, plan_reruns, until
from safelaunch.isolation.verdicts import Seen, Verdict, judge
from safelaunch.outcome import AttemptStatus
from safelaunch.plan import LaunchPlan, build_plan
from safelaunch.report_json import write_report
from safelaunch.rundir import report_file
from safelaunch.rundir.writing import shown_path
from safelaunch.supervisor import open_attempt_logs


def isolate(session: Session, plan: LaunchPlan, job: Concluded) -> None:
    """The reruns after the last attempt; their verdicts join its report.json."""
    config, console = session.config, session.console
    seen_job = Seen(
        outcome=job.outcome,
        diagnosis=job.diagnosis,
        files=read_rank_files(job.outcome, job.diagnosis),
    )
    job_comm = seen_job.files.comm
    decision = should_isolate(
        config.isolate,
        job.outcome,
        job.diagnosis,
        job_comm.backend,
        detail_safe(job_comm, config.environ),
    )
    timebox = failure_point(read_beats(plan), job.outcome.duration, config.isolate_timeout)
    reruns = plan_reruns(
        decision,
        timebox,
        job_comm,
        config.environ,
        single=config.isolate_single,
        transports=config.isolate_nccl,
        nproc=len(plan.workers),
    )
    if not decision.run:
        console.say(f"isolation: no Gloo rerun: {decision.reason}")
    verdicts: list[Verdict] = []
    notes = list(reruns.notes)
    for planned in reruns.planned:
        purpose = planned.rerun.purpose
        late = session.receiver.take()
        if late:
            notes.append(f"stopped by {signal_name(late[0])} before the rerun {purpose}")
            break
        verdict = _rerun(session, plan, seen_job, planned)
        verdicts.append(verdict)
        if verdict.ran.status == AttemptStatus.INTERRUPTED:
            notes.append(f"interrupted during the rerun {purpose}: later reruns skipped")
            break
    job.report["isolation"] = isolation_record(decision, verdicts, notes)
    write_report(report_file.report(job.outcome.attempt_dir), job.report)


def _rerun(session: Session, plan: LaunchPlan, job: Seen, planned: Planned) -> Verdict:
    """One isolation rerun, start to verdict, in its own directory with its own report.json."""
    console, rerun = session.console, planned.rerun
    rerun_plan = build_plan(
        session.config, session.preflight, session.identity, plan.attempt, rerun
    )
    logs_ok = open_attempt_logs(rerun_plan, console)
    console.say(
        f"isolation: rerunning the job {rerun.purpose} {rerun.why}; "
        f"{until(rerun.timebox)}; logs: {shown_path(rerun_plan.attempt_dir)}"
    )
    try:
        ran = run_attempt(session, rerun_plan, logs_ok=logs_ok)
        files = read_rank_files(ran.outcome, ran.diagnosis)
        seen = Seen(outcome=ran.outcome, diagnosis=ran.diagnosis, files=files)
        verdict = judge(planned, job, seen)
        console.say(render_verdict(verdict))
    finally:
        console.close_log()
    return verdict
