"""Multi-node orchestration around each attempt: join, start together, one verdict, leave.

The launch loop (launch.py) calls these only for --nnodes > 1. The rules of the verdict
are diagnose/nodes.py's; the store's keys are rendezvous/membership.py's; this module
says what the user sees while the nodes join, wait for each other and conclude.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from safelaunch import exitcodes
from safelaunch.config import LaunchConfig, RdzvBackend
from safelaunch.console import Console
from safelaunch.exitcodes import signal_name
from safelaunch.preflight import PreflightReport
from safelaunch.rundir import report_file
from safelaunch.slurm import node_name
from safelaunch.supervisor import SignalReceiver
from safelaunch.supervisor.attempt_record import PeerWatch

if TYPE_CHECKING:  # imported where used: a single-node launch needs none of them, and
    # the launch loads diagnosis and the report only once its ranks run (attempt.JUDGING)
    from safelaunch.diagnose import Diagnosis
    from safelaunch.diagnose.nodes import JobVerdict
    from safelaunch.outcome import Outcome
    from safelaunch.rendezvous.membership import Membership

START_TIMEOUT = 120.0  # every node reaches an attempt's start within this
SAY_WAITING_AFTER = 2.0  # a finished node says whom it waits for once the wait is noticeable
END_SLACK = 30.0  # diagnosis and report time on top of the teardown, before a node counts as lost
LEAVE_TIMEOUT = 30.0  # the store's host waits this long for the others to read the verdict


def join(
    config: LaunchConfig,
    preflight: PreflightReport,
    console: Console,
    meanwhile: Callable[[], None] | None = None,
) -> Membership:
    """Torch's rendezvous, the nodes' facts compared, this node placed; `meanwhile()` run
    while torch's rendezvous waits for the other nodes."""
    from safelaunch.rendezvous.joining import join as join_nodes

    where = (
        f"c10d at {config.rdzv_endpoint}"
        if config.rdzv_backend == RdzvBackend.C10D
        else f"static at {config.master_addr or '127.0.0.1'}:{config.master_port or 29500}"
    )
    low, high = config.nnodes
    count = str(low) if low == high else f"{low}-{high}"
    console.say(f"rendezvous ({where}): waiting for {count} node(s)")
    host = _host(config)
    membership = join_nodes(
        config, preflight.nproc, preflight.node_facts, host, console.say, meanwhile
    )
    _say_placed(console, membership, host, preflight.nproc)
    return membership


def _host(config: LaunchConfig) -> str:
    return config.local_addr or node_name(config.environ) or socket.getfqdn()


def _say_placed(console: Console, membership: Membership, host: str, nproc: int) -> None:
    place = membership.placement
    last = place.base_rank + nproc - 1
    # Only node 0 reads every node's live snapshot (rendezvous/live_exchange.py)
    where = (
        ""
        if membership.judges
        else f"; `safelaunch status` shows this node's ranks here, every node's on "
        f"{membership.describe(0)}"
    )
    console.say(
        f"node {place.node} of {place.nodes} ({host}): ranks {place.base_rank}-{last} of "
        f"{place.world_size}; every node checked alike (torch, CUDA, NCCL, driver, GPUs)" + where
    )


def elastic(config: LaunchConfig) -> bool:
    """--nnodes MIN:MAX on c10d: the nodes meet again at each restart, as torchrun's do."""
    low, high = config.nnodes
    return low < high and config.rdzv_backend == RdzvBackend.C10D


def goes_on(config: LaunchConfig, job: JobVerdict) -> bool:
    """A restart for the job: every node still there (torchrun's rule), or, elastic, the
    nodes that remain (a lost node ends a fixed-size job: exit 69)."""
    from safelaunch.outcome import AttemptStatus

    failed = job.status in (AttemptStatus.FAILED, AttemptStatus.HUNG)
    return job.retryable or (failed and elastic(config))


def rejoin(
    config: LaunchConfig,
    preflight: PreflightReport,
    console: Console,
    membership: Membership,
    *,
    attempt: int,
    restart_count: int,
    lost: Sequence[int],
    admitting: bool,
) -> None:
    """The next round of an elastic rendezvous before `attempt`, said before it starts
    (it may wait for nodes); round_change says what it changed."""
    from safelaunch.rendezvous.joining import rejoin as rejoin_nodes

    left = [membership.describe(n) for n in lost]
    low, high = config.nnodes
    if left:
        why = f" without {', '.join(left)} (lost in attempt {attempt - 1})"
    elif admitting:
        why = " to admit the node(s) waiting to join"
    else:
        why = ""
    console.say(f"elastic: rendezvous again for attempt {attempt}{why}: {low}-{high} node(s)")
    host = _host(config)
    rejoin_nodes(
        membership,
        config,
        preflight.nproc,
        preflight.node_facts,
        host,
        attempt=attempt,
        restart_count=restart_count,
    )
    _say_placed(console, membership, host, preflight.nproc)


def round_change(
    config: LaunchConfig, console: Console, membership: Membership
) -> dict[str, Any] | None:
    """What this node's round changed (who left, who joined, the count), said in one
    line; the record for report.json's `membership`. None for the job's first round."""
    from safelaunch.rendezvous.rounds import change_line, change_record

    change = membership.round
    if change is None or change.first:
        return None
    console.say(change_line(change, config.max_restarts))
    return change_record(change)


def watch(config: LaunchConfig, membership: Membership, attempt: int) -> PeerWatch:
    """What the supervisor polls: the other nodes and, an elastic job with fewer nodes
    than its maximum, the nodes waiting to join (rendezvous/admission.py)."""
    from safelaunch.rendezvous import admission

    room = elastic(config) and membership.placement.nodes < config.nnodes[1]
    return admission.watch(membership, attempt, room)


def rescaled(job: JobVerdict) -> bool:
    """The attempt stopped to admit waiting nodes: the job goes on, no restart counted."""
    from safelaunch.outcome import AttemptStatus

    return job.status is AttemptStatus.RESCALED


def conclude(
    membership: Membership,
    *,
    outcome: Outcome,
    diagnosis: Diagnosis,
    report: dict[str, Any],
    console: Console,
    receiver: SignalReceiver,
    shutdown_timeout: float,
    changes: Sequence[Mapping[str, Any]] = (),
) -> JobVerdict:
    """Every node's summary to node 0, which judges; the same verdict on every node, reported.

    Node 0 reads every summary and publishes the verdict; the others read that one
    record (O(N) in all, not every node reading every summary). When node 0 gives none
    (it was lost, or a signal stopped its wait) every other node judges from every
    summary itself, by the same rule, as every node did before.

    `report`: this node's report.json content for the attempt; the verdict is added to
    it as `job` and the file rewritten.
    """
    from safelaunch.diagnose import job_json
    from safelaunch.diagnose.nodes import conclude_job, node_summary, read_summary
    from safelaunch.report_json import job_record, write_report

    place = membership.placement
    mine = node_summary(report, outcome, diagnosis, place.node, place.hosts[place.node])
    timeout = shutdown_timeout + membership.lost_after + END_SLACK
    waiting = WaitForNodes(console, receiver, membership)
    job = None
    if not membership.judges:
        text, missing = membership.await_verdict(outcome.attempt, mine, timeout, waiting)
        if waiting.interrupted is not None:
            job = _stopped_waiting(console, membership, waiting.interrupted, missing)
        elif text is not None:
            job = job_json.from_json(text)
    if job is None:
        sent = membership.end_attempt(outcome.attempt, mine, timeout, waiting)
        summaries = [read_summary(s) for s in sent]
        if waiting.interrupted is not None:
            missing = [n for n, s in enumerate(summaries) if s is None]
            job = _stopped_waiting(console, membership, waiting.interrupted, missing)
        else:
            first = membership.first_stop(outcome.attempt)
            job = conclude_job(summaries, place.hosts, first, membership.lost_after)
            # read back as the others read it: report.json's `job` is the same everywhere
            job = job_json.from_json(job_json.to_json(job)) or job
        if membership.judges:
            stopped = waiting.interrupted is not None
            membership.publish_verdict(outcome.attempt, None if stopped else job_json.to_json(job))
    if job.lines:  # its "exit code" line is the caller's: the last line printed
        console.say(f"job ({place.nodes} nodes): " + "\n  ".join(job.lines))
    report["job"] = job_record(place, job)
    report["membership"] = list(changes)  # elastic: the rounds so far (rejoin)
    write_report(report_file.report(outcome.attempt_dir), report)
    return job


class WaitForNodes:
    """While other nodes' ranks still run: say whom this node waits for; stop on a signal."""

    def __init__(self, console: Console, receiver: SignalReceiver, membership: Membership) -> None:
        self._console = console
        self._receiver = receiver
        self._membership = membership
        self._said = False
        self.interrupted: int | None = None

    def poll(self, missing: list[int], waited: float) -> bool:
        pending = self._receiver.pending
        if pending:
            self.interrupted = pending[0]
            return True
        if not self._said and waited >= SAY_WAITING_AFTER:
            self._said = True
            names = ", ".join(self._membership.describe(n) for n in missing)
            self._console.say(
                f"this node is done; waiting for the job's verdict from {names}, whose "
                "launcher is alive (its ranks still run; Ctrl-C stops waiting)"
            )
        return False


def _stopped_waiting(
    console: Console, membership: Membership, signum: int, missing: Sequence[int]
) -> JobVerdict:
    """A signal while this node waited for the others: its own stop, said as such."""
    from safelaunch.diagnose.nodes import JobVerdict
    from safelaunch.outcome import AttemptStatus

    names = ", ".join(membership.describe(n) for n in missing)
    console.say(f"received {signal_name(signum)} while waiting for {names}: stopping")
    return JobVerdict(
        status=AttemptStatus.INTERRUPTED, code=exitcodes.for_signal(signum), lines=(), lost=()
    )


def not_starting(
    console: Console,
    membership: Membership,
    attempt: int,
    stopping: list[int],
    missing: list[int],
    late: list[int],
) -> int:
    """Some node will not start the next attempt: none does. The code says why."""
    names = [membership.describe(n) for n in stopping + missing]
    if late:
        console.say(f"received {signal_name(late[0])} before the restart: stopping")
        return exitcodes.for_signal(late[0])
    if stopping:
        console.say(f"{', '.join(names)} stopped before attempt {attempt}: stopping too")
        return exitcodes.for_signal(signal.SIGTERM)
    console.say(
        f"{', '.join(names)} did not come to attempt {attempt} within {START_TIMEOUT:g} s: stopping"
    )
    return exitcodes.NODE_LOST
