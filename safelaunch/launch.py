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
from pathlib import Path
from typing import Any

from safelaunch import exitcodes
from safelaunch.config import LaunchConfig
from safelaunch.console import Console
from safelaunch.diagnose import diagnose, signatures
from safelaunch.diagnose.signatures import Signature
from safelaunch.outcome import Outcome, outcome_of, signal_name
from safelaunch.plan import LaunchPlan, RunIdentity, build_plan
from safelaunch.preflight import PreflightReport, run_preflight
from safelaunch.report import exit_code, render_summary, report_record, shown_path, write_report
from safelaunch.supervisor import (
    AttemptRecord,
    Keeper,
    SignalReceiver,
    become_subreaper,
    open_attempt_logs,
    supervise,
)


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
        return _attempts(config, preflight, identity, receiver, console, keeper.pid, table)
    finally:
        receiver.restore()
        if keeper is not None:
            keeper.stop()
        preflight.master_port.release()
        shutil.rmtree(identity.private_dir, ignore_errors=True)


def _attempts(
    config: LaunchConfig,
    preflight: PreflightReport,
    identity: RunIdentity,
    receiver: SignalReceiver,
    console: Console,
    keeper_pid: int,
    table: Sequence[Signature],
) -> int:
    history: list[dict[str, Any]] = []  # every attempt's status, for report.json
    for attempt in range(config.max_restarts + 1):
        plan = build_plan(config, preflight, identity, attempt)
        logs_ok = open_attempt_logs(plan, console)
        console.say(banner(config, preflight, plan))
        if attempt == 0 and preflight.warnings:
            console.say("\n".join(preflight.warnings), "warning")
        try:
            record = supervise(plan, console, receiver, logs_ok=logs_ok, keeper_pid=keeper_pid)
            outcome, code = _conclude(record, console, config.max_restarts, table, history)
        finally:
            console.close_log()
        if not outcome.retryable or attempt == config.max_restarts:
            return code
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
) -> tuple[Outcome, int]:
    """Judge, diagnose, report (console, launcher.log, report.json); the attempt's exit code."""
    outcome = outcome_of(record)
    diagnosis = diagnose(outcome, table)
    console.say(render_summary(outcome, diagnosis))
    report = report_record(outcome, diagnosis, record.plan.run.run_id, max_restarts, history)
    write_report(outcome.attempt_dir / "report.json", report)
    history.append(report["attempts"][-1])
    return outcome, exit_code(outcome, diagnosis)
