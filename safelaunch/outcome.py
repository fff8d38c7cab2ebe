"""Outcome: judging an attempt: who failed first, who safelaunch stopped, the exit code.

Root cause = the earliest failure, as in torch elastic; ranks safelaunch
stopped itself are never failures.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

from safelaunch import exitcodes
from safelaunch.exitcodes import signal_name
from safelaunch.hangs.detection import Survivors
from safelaunch.hangs.rhythm import Deadline
from safelaunch.plan import DUMP_SIGNAL
from safelaunch.rendezvous.stops import NodeStop, StopKind
from safelaunch.supervisor import AttemptRecord, HangEvidence, RankExit
from safelaunch.supervisor.teardown import TeardownCause
from safelaunch.vocab import StrEnum, word_of

# A rank's end time, in seconds from the attempt's start, to the millisecond: what
# report.json keeps and `explain` judges from. The live verdict uses the same figure, so
# that two ranks ending within a millisecond come first in the same order both ways (the
# lower rank, on a tie); a finer clock would let the live run and explain disagree.
ENDED_DECIMALS = 3


class AttemptStatus(StrEnum):
    """How an attempt ended: report.json's "status"."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    HUNG = "hung"
    INTERRUPTED = "interrupted"
    # an isolation rerun stopped by its time box: past the job's failure point, or at its cap
    PASSED = "passed"
    TIMEBOXED = "timeboxed"
    # elastic: stopped to admit nodes that wait to join (not a failure, not a restart)
    RESCALED = "rescaled"


class RankEnding(StrEnum):
    """How one rank ended, judged: report.json's ranks' "state"."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"  # safelaunch stopped it itself
    NOT_STARTED = "not started"  # an earlier rank's failure to start kept it back


# What safelaunch sends to stop ranks (supervisor/loop.py): SIGTERM, SIGKILL at the
# deadline, or the interrupt it forwards. The dump signal asks for stacks and flight
# records: it stops nothing (a rank that dies of it was exiting on its own).
STOP_SIGNALS: frozenset[int] = frozenset({signal.SIGTERM, signal.SIGKILL})


def attempt_status(text: str) -> AttemptStatus:
    """An attempt's status read back (another node's summary); ValueError if it is none."""
    status = word_of(text, AttemptStatus)
    if status is None:
        raise ValueError(f"{text!r} is not an attempt status")
    return status


@dataclass(frozen=True, slots=True, kw_only=True)
class RankResult:
    """One rank's end, judged."""

    rank: int
    local_rank: int
    pid: int | None
    state: RankEnding
    exit_code: int | None  # the process's own code; None when a signal ended it
    signal: int | None
    ended_after: float
    log_path: Path
    error_file: Path
    start_error: str | None = None
    # stopped, and the signal it died of is one safelaunch sends to stop ranks
    stop_sent: bool = True

    @property
    def shell_code(self) -> int:
        """The code a shell would show: 128 + N for death by signal N."""
        if self.signal is not None:
            return exitcodes.for_signal(self.signal)
        return self.exit_code or 0

    def how_it_ended(self) -> str:
        """`exited with code 3`, `died of SIGSEGV (exit 139)`, ..."""
        if self.state == RankEnding.NOT_STARTED:
            return "not started: an earlier rank could not start"
        if self.start_error:
            return self.start_error
        if self.signal is not None:
            name = signal_name(self.signal)
            return f"died of {name} (exit {self.shell_code})"
        return f"exited with code {self.exit_code}"

    def stop_label(self) -> str:
        """How a rank that ended after safelaunch began stopping the job ended."""
        if self.signal is None:
            return f"stopped by safelaunch, then exited with code {self.exit_code}"
        if self.stop_sent:
            return f"stopped by safelaunch ({signal_name(self.signal)})"
        if self.signal == DUMP_SIGNAL:  # no handler any more: Python was tearing down
            return (
                f"{self.how_it_ended()}: exiting on its own when safelaunch's request for "
                "its stacks and flight record reached it"
            )
        return f"{self.how_it_ended()} after safelaunch began stopping the job"


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How an attempt ended and the code safelaunch exits with."""

    attempt: int
    status: AttemptStatus  # passed and timeboxed: isolation reruns only
    ranks: tuple[RankResult, ...]
    first_failure: RankResult | None
    interrupt_signal: int | None
    exit_code: int
    duration: float
    strays_ended: int
    log_problems: tuple[str, ...]
    run_dir: Path
    attempt_dir: Path
    hang: HangEvidence | None = None
    timebox_note: str | None = None  # an isolation rerun: why it was stopped early
    peer_event: NodeStop | None = None  # multi-node: another node made this one stop
    multinode: bool = False  # one node of several: its ranks are not the whole job
    # a failure: where the ranks still alive were when it happened (taken before teardown)
    survivors: Survivors | None = None
    hang_deadline: Deadline | None = None  # the hang deadline at the attempt's end

    @property
    def retryable(self) -> bool:
        """A failure or a hang counts against --max-restarts; success and interrupts end the run."""
        return self.status in (AttemptStatus.FAILED, AttemptStatus.HUNG)


def judge(
    exit_: RankExit, teardown_after: float | None, sent: frozenset[int] = STOP_SIGNALS
) -> RankResult:
    """A rank failed if it ended non-zero before safelaunch began stopping ranks.

    One that ended after is stopped, never a failure; `sent`: the signals safelaunch
    sent to stop ranks, so that one that died of another is not said stopped by it.
    """
    code = exit_.returncode
    state: RankEnding
    if exit_.skipped:
        state = RankEnding.NOT_STARTED
    elif code == 0:
        state = RankEnding.SUCCEEDED
    elif teardown_after is None or exit_.ended_after < teardown_after or exit_.start_error:
        state = RankEnding.FAILED
    else:
        state = RankEnding.STOPPED
    return RankResult(
        rank=exit_.rank,
        local_rank=exit_.local_rank,
        pid=exit_.pid,
        state=state,
        exit_code=code if code >= 0 else None,
        signal=-code if code < 0 else None,
        ended_after=round(exit_.ended_after, ENDED_DECIMALS),
        log_path=exit_.log_path,
        error_file=exit_.error_file,
        start_error=exit_.start_error,
        stop_sent=state != RankEnding.STOPPED or code >= 0 or -code in sent,
    )


def _peer_interrupt(event: NodeStop | None) -> int | None:
    """The signal that interrupted the node whose announcement stopped this one."""
    if event is None or event.kind is not StopKind.INTERRUPTED:
        return None
    return event.code


def _rescaling(event: NodeStop | None) -> bool:
    return event is not None and event.kind is StopKind.NODES_JOINING


def outcome_of(record: AttemptRecord) -> Outcome:
    """Judge every rank and pick the root cause."""
    sent = STOP_SIGNALS | ({record.interrupt_signal} if record.interrupt_signal else set())
    ranks = tuple(judge(e, record.teardown_after, sent) for e in record.exits)
    failures = sorted(
        (r for r in ranks if r.state == RankEnding.FAILED), key=lambda r: r.ended_after
    )
    first = failures[0] if failures else None
    status: AttemptStatus
    cause = record.teardown_cause
    if cause is TeardownCause.SIGNAL and record.interrupt_signal is not None:
        status, code = AttemptStatus.INTERRUPTED, exitcodes.for_signal(record.interrupt_signal)
    elif cause is TeardownCause.HANG:
        status, code = AttemptStatus.HUNG, exitcodes.HANG
    elif cause in (TeardownCause.PASSED, TeardownCause.TIMEBOX) and first is None:
        status = AttemptStatus.PASSED if cause is TeardownCause.PASSED else AttemptStatus.TIMEBOXED
        code = exitcodes.SUCCESS
    elif cause is TeardownCause.PEER and _rescaling(record.peer_event):
        status, code = AttemptStatus.RESCALED, exitcodes.SUCCESS
    elif first is not None:
        status, code = AttemptStatus.FAILED, first.shell_code
    elif cause is TeardownCause.PEER and (signum := _peer_interrupt(record.peer_event)):
        # scancel reached that node first: this one was interrupted too, just by word of it
        status, code = AttemptStatus.INTERRUPTED, exitcodes.for_signal(signum)
    elif cause is TeardownCause.PEER:  # the cause is on another node
        status, code = AttemptStatus.FAILED, 1
    else:
        status, code = AttemptStatus.SUCCEEDED, exitcodes.SUCCESS
    return Outcome(
        attempt=record.plan.attempt,
        status=status,
        ranks=ranks,
        first_failure=first,
        interrupt_signal=record.interrupt_signal,
        exit_code=code,
        duration=record.duration,
        strays_ended=record.strays_ended,
        log_problems=record.log_problems,
        run_dir=record.plan.run.run_dir,
        attempt_dir=record.plan.attempt_dir,
        hang=record.hang,
        timebox_note=record.timebox_note,
        peer_event=record.peer_event,
        multinode=record.plan.node is not None,
        survivors=record.survivors,
        hang_deadline=record.hang_deadline,
    )
