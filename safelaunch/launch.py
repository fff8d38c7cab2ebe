"""The orchestrator: preflight once, then attempts until one succeeds or restarts run out.

A restart is data moving forward: a new plan for attempt n+1, a new attempt
directory; no stage calls back into an earlier one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safelaunch import exitcodes, multinode
from safelaunch.config import LaunchConfig
from safelaunch.console import Console, Level
from safelaunch.exitcodes import signal_name
from safelaunch.lint import Severity
from safelaunch.lint.findings_text import lint_banner
from safelaunch.plan import LaunchPlan, RunIdentity, build_plan
from safelaunch.preflight import PreflightReport, run_preflight
from safelaunch.rundir import layout, rank_logs, report_file
from safelaunch.rundir.writing import shown_path, write_file
from safelaunch.slurm import in_step
from safelaunch.supervisor import Keeper, SignalReceiver, become_subreaper, open_attempt_logs

if TYPE_CHECKING:  # imported where used: a clean single-node launch needs none of them
    from safelaunch.attempt import Concluded, Session
    from safelaunch.diagnose.signatures import Signature
    from safelaunch.metrics_export import MetricsEndpoint
    from safelaunch.on_verdict import Notifier
    from safelaunch.rendezvous.membership import Membership
    from safelaunch.restarts.rule import AttemptFacts


NCCL_PREFIXES = ("NCCL_", "TORCH_NCCL_")


def new_run(config: LaunchConfig) -> RunIdentity:
    """A fresh run id (sortable by start time), its directory and its process token."""
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(3).hex()}"
    return RunIdentity(
        run_id=run_id,
        run_dir=config.log_dir.resolve() / run_id,
        token=os.urandom(16).hex(),
        private_dir=Path(tempfile.mkdtemp(prefix=f"{layout.PRIVATE_PREFIX}{run_id}-")),  # 0700
        launcher_pid=os.getpid(),
    )


def point_latest(log_dir: Path, run_id: str) -> None:
    """<log-dir>/latest -> this run, for the 3 a.m. `cd safelaunch_logs/latest`."""
    with contextlib.suppress(OSError):
        log_dir.mkdir(parents=True, exist_ok=True)
        temporary = log_dir / f".{layout.LATEST}-{run_id}"
        temporary.symlink_to(run_id)
        os.replace(temporary, layout.latest(log_dir))


def banner(
    config: LaunchConfig,
    preflight: PreflightReport,
    plan: LaunchPlan,
    logs_ok: bool = True,
    first: int = 0,
) -> str:
    """What is about to run, and every variable safelaunch chose for the ranks.

    Without logs (`logs_ok` False, said in a warning just before) no log path is named.
    `first`: this node's first attempt (a node joining an elastic job late: the job's).
    """
    where = shown_path(plan.attempt_dir)
    if plan.attempt != first:
        logs = f"logs in {where}" if logs_ok else "no logs"
        count = int(plan.workers[0].env["TORCHELASTIC_RESTART_COUNT"])
        if count == plan.attempt:
            return f"restart {plan.attempt} of {config.max_restarts}: {logs}"
        # elastic: an attempt that admitted nodes is not a restart (torchrun's count)
        return f"attempt {plan.attempt} ({count} of {config.max_restarts} restarts used): {logs}"
    first, last = plan.workers[0].rank, plan.workers[-1].rank
    env = plan.workers[0].env
    lines = [
        f"{preflight.nproc} rank(s) ({preflight.nproc_reason}), "
        f"MASTER_ADDR={env['MASTER_ADDR']} MASTER_PORT={env['MASTER_PORT']}"
    ]
    if logs_ok:
        lines.append(f"logs: {rank_logs.log_pattern(Path(where), first, last)}")
    lines.extend(preflight.gpu_lines)
    if plan.env_choices:
        chosen = chosen_env(plan, gloo_only=preflight.visible_gpus == 0)
        lines.append(
            f"set for the ranks ({config.debug_profile} profile; yours are never changed): {chosen}"
        )
    lines.extend(f"note: {notice}" for notice in config.notices)
    return "\n".join(lines)


def chosen_env(plan: LaunchPlan, *, gloo_only: bool) -> str:
    """The variables safelaunch set, for the banner; NCCL's only counted on a Gloo-only job.

    With no GPU visible NCCL cannot run, so the job's collectives are Gloo's: naming NCCL's
    variables would only lengthen the line. They are still set (they cost nothing, and the
    environment stays the same whatever the machine).
    """
    run_dir = str(plan.run.run_dir / "attempt_{n}")
    unused = [c for c in plan.env_choices if gloo_only and c.name.startswith(NCCL_PREFIXES)]
    shown = [
        f"{c.name}={c.value.replace(run_dir, '<attempt dir>')}"
        for c in plan.env_choices
        if c not in unused
    ]
    text = ", ".join(shown)
    if unused:
        text += f"{'; and ' if shown else ''}{len(unused)} NCCL variables, unused (no GPU: Gloo)"
    return text


def run(config: LaunchConfig, console: Console) -> int:
    """Launch the job; return the exit code (see exitcodes)."""
    table = user_table(config.signatures_file)  # a bad file stops us before anything starts
    preflight = run_preflight(config)
    identity = new_run(config)
    receiver = SignalReceiver(config.signals_to_handle, pass_on=not in_step(config.environ))
    keeper: Keeper | None = None
    membership: Membership | None = None
    notifier: Notifier | None = None
    metrics: MetricsEndpoint | None = None
    code: int | None = None
    try:
        metrics = _metrics(config, identity.run_dir)  # a taken port: 78 before any rank
        notifier = _notifier(config, identity, console)
        become_subreaper()
        keeper = Keeper.start(identity.token, str(identity.private_dir))  # before any thread
        if config.origins:
            console.say("from SLURM (flags win): " + ", ".join(config.origins))
        for line in config.slurm_unread:
            console.say(line, Level.WARNING)
        if config.nnodes[1] > 1:
            # Torch's store wait is a native call: the CLI's early SIGTERM handler would only
            # run when it returns (join_timeout later). The kernel's default ends us at once.
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            membership = multinode.join(config, preflight, console, meanwhile=_load_attempt)
        receiver.install()
        from safelaunch.attempt import Session  # loaded by now on a multi-node launch

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
        code = _attempts(session, notifier)
        return code
    finally:
        _views(identity.run_dir)
        if notifier is not None:  # after the views: the run's pages are there to link to
            notifier.job_ended(code, sys.exc_info()[1])
        if metrics is not None:
            metrics.stop()
        if membership is not None:
            membership.leave(timeout=multinode.LEAVE_TIMEOUT)
        receiver.settle()  # the code is decided: a late SIGTERM must not replace it
        if keeper is not None:
            keeper.stop()
        preflight.master_port.release()
        shutil.rmtree(identity.private_dir, ignore_errors=True)


def _load_attempt() -> None:
    """The attempt's supervisor and what judges it (attempt.JUDGING), ~25 ms of imports:
    a multi-node launch loads them while torch's rendezvous waits for the other nodes,
    off the path to the spawn; a single-node launch loads the supervisor just before its
    spawn, and JUDGING while its ranks start."""
    from safelaunch.attempt import load_judging

    load_judging()


def user_table(path: str | None) -> Sequence[Signature] | None:
    """The signature table with the user's --signatures file first; None without one.

    Without a file the built-in table is left to diagnosis, which loads it once the ranks
    run (attempt.JUDGING): a plain launch does not wait for it to compile.
    """
    if not path:
        return None
    from safelaunch.diagnose.user_signatures import load

    return load(path)


def _views(run_dir: Path) -> None:
    """report.html and timeline.json for the whole run; never a reason to fail it."""
    if not report_file.report(layout.attempt_dir(run_dir, 0)).exists():
        return  # nothing ran (stopped before the first attempt)
    from safelaunch.view import write_views

    with contextlib.suppress(Exception):
        write_views(run_dir, write_file)


def _metrics(config: LaunchConfig, run_dir: Path) -> MetricsEndpoint | None:
    """--metrics-port's endpoint; None without it (prometheus-client is then never loaded)."""
    if not config.metrics_port:
        return None
    from safelaunch.metrics_export import serve

    endpoint = serve(config.metrics_addr, config.metrics_port)
    endpoint.watch(run_dir, config.max_restarts)
    return endpoint


def _notifier(config: LaunchConfig, identity: RunIdentity, console: Console) -> Notifier | None:
    """--on-verdict's caller; None without the flag (on_verdict is then never imported)."""
    if not config.on_verdict:
        return None
    from safelaunch.on_verdict import Notifier

    return Notifier(
        config.on_verdict,
        timeout=config.on_verdict_timeout,
        environ=config.environ,
        run_id=identity.run_id,
        run_dir=identity.run_dir,
        node_rank=config.node_rank,
        console=console,
    )


def _told(
    notifier: Notifier | None,
    plan: LaunchPlan,
    concluded: Concluded,
    status: str,
    code: int,
    restarting: bool,
) -> None:
    """The attempt's verdict to --on-verdict: the summary's first line and the error."""
    if notifier is None:
        return
    from safelaunch.on_verdict import verdict_line
    from safelaunch.report import render_summary  # loaded by now (attempt.JUDGING)

    head = render_summary(concluded.outcome, concluded.diagnosis).split("\n", 1)[0]
    error = concluded.report["diagnosis"]["error"] if status != "succeeded" else None
    notifier.attempt_ended(
        attempt=plan.attempt,
        line=verdict_line(head, error if isinstance(error, str) else None),
        status=status,
        exit_code=code,
        attempt_dir=plan.attempt_dir,
        restarting=restarting,
        node=plan.node,
    )


def _attempts(session: Session, notifier: Notifier | None = None) -> int:
    from safelaunch.attempt import run_attempt

    config, preflight, console = session.config, session.preflight, session.console
    receiver, membership = session.receiver, session.membership
    history: list[dict[str, Any]] = []  # every attempt's status, for report.json
    # the failed attempts, for the restart policy; a multi-node job restarts as torchrun
    failures: list[AttemptFacts] | None = [] if membership is None else None
    changes: list[dict[str, Any]] = []  # elastic: each new round of the rendezvous
    lost: tuple[int, ...] = ()  # the nodes the last attempt lost
    elastic = membership is not None and multinode.elastic(config)
    # An elastic job's attempts are not all restarts: a round that admits waiting nodes
    # starts one without counting it (TORCHELASTIC_RESTART_COUNT), as torchrun's agent.
    # A node that joins late takes the job's attempt and count from its round.
    attempt, restarts = 0, 0
    if elastic and membership is not None and membership.round is not None:
        attempt, restarts = membership.round.attempt, membership.round.restart_count
        _changed(changes, multinode.round_change(config, console, membership))
    first = attempt
    again: bool | None = None  # the nodes meet again before this attempt: admitting if True
    while True:
        late = receiver.take() if attempt else []
        if membership is not None and elastic and again is not None and not late:
            multinode.rejoin(
                config,
                preflight,
                console,
                membership,
                attempt=attempt,
                restart_count=restarts,
                lost=lost,
                admitting=again,
            )
            _changed(changes, multinode.round_change(config, console, membership))
        if membership is not None:  # every node starts the attempt, or none does
            stopping, missing = membership.start_attempt(attempt, not late, multinode.START_TIMEOUT)
            if stopping or missing:
                if notifier is not None:
                    notifier.ended_between_attempts(
                        f"stopped before attempt {attempt}: a node stopped or left", "interrupted"
                    )
                return multinode.not_starting(console, membership, attempt, stopping, missing, late)
        if late:  # a signal between attempts: do not start another
            said = f"received {signal_name(late[0])} before the restart: stopping"
            console.say(said)
            if notifier is not None:
                notifier.ended_between_attempts(said, "interrupted")
            return exitcodes.for_signal(late[0])
        placement = (
            replace(
                membership.placement_for(attempt, multinode.START_TIMEOUT),
                restart_count=restarts,
            )
            if membership is not None
            else None
        )
        plan = build_plan(config, preflight, session.identity, attempt, placement=placement)
        logs_ok = open_attempt_logs(plan, console)
        console.say(banner(config, preflight, plan, logs_ok, first))
        if attempt == first and preflight.warnings:
            console.say("\n".join(preflight.warnings), Level.WARNING)
        if attempt == first and any(f.severity != Severity.HINT for f in preflight.lint):
            console.say(lint_banner(config.training_script, preflight.lint), Level.WARNING)
        try:
            peers = multinode.watch(config, membership, attempt) if membership else None
            concluded = run_attempt(
                session, plan, logs_ok=logs_ok, peers=peers, history=history, failures=failures
            )
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
                    changes=changes,
                )
                retry, code, lost = multinode.goes_on(config, job), job.code, job.lost
                status = str(job.status)
                if multinode.rescaled(job):  # admit the waiting nodes: not a restart
                    _told(notifier, plan, concluded, status, code, True)
                    attempt, again = attempt + 1, True
                    continue
                closing = f"exit code {job.code} on every node" if job.lines else None
            else:
                retry, code = concluded.outcome.retryable, concluded.code
                status = str(concluded.outcome.status)
            restart = concluded.restart
            last = restarts == config.max_restarts or (restart is not None and not restart.restart)
            _told(notifier, plan, concluded, status, code, retry and not last)
            if retry and not last and closing is not None:
                console.say(closing)  # a restart follows: this attempt's code, in its log
        finally:
            console.close_log()
        if not retry or last:
            if retry and membership is None:
                # imported here: a job that succeeds never loads isolation (launch cost)
                from safelaunch.isolation.driver import isolate

                isolate(session, plan, concluded)
            elif retry:
                console.say(MULTINODE_NO_RERUN)
            if closing is not None:  # the last line printed, after any rerun
                _say_in_attempt_log(console, plan, closing)
            return code
        attempt, restarts, again = attempt + 1, restarts + 1, False


def _changed(changes: list[dict[str, Any]], change: dict[str, Any] | None) -> None:
    if change is not None:
        changes.append(change)


MULTINODE_NO_RERUN = (
    "isolation: no Gloo rerun: a multi-node job's rerun needs every node to rejoin a fresh "
    "rendezvous together, and safelaunch reruns within one node only; the job verdict "
    "above weighs every node's evidence"
)


def _say_in_attempt_log(console: Console, plan: LaunchPlan, text: str) -> None:
    """Say it, and append it to the attempt's launcher.log (reruns had logs of their own)."""
    with contextlib.suppress(OSError):
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        console.attach_log(os.open(rank_logs.launcher_log(plan.attempt_dir), flags))
    try:
        console.say(text)
    finally:
        console.close_log()
