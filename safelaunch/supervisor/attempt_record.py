"""What the supervisor hands on: how each rank ended, what happened in the attempt."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from safelaunch.console import Console, Level
from safelaunch.hangs.detection import HangEvidence, Survivors
from safelaunch.hangs.rhythm import Deadline
from safelaunch.plan import LaunchPlan
from safelaunch.rendezvous.live_exchange import Shared
from safelaunch.rendezvous.stops import NodeStop
from safelaunch.rundir import rank_logs
from safelaunch.supervisor.teardown import TeardownCause


class PeerWatch(Protocol):
    """Multi-node: the other nodes, as the supervisor sees them (safelaunch.rendezvous)."""

    @property
    def pace(self) -> float:
        """Seconds between two of poll()'s looks at the store (it returns at once between)."""

    def poll(self) -> NodeStop | None:
        """Why this node must stop its ranks now (another node stopped, or vanished)."""

    def announce(self, stop: NodeStop) -> None:
        """This node is stopping its ranks: tell the others."""

    def share(self, snapshot: str) -> Shared:
        """This node's live snapshot out; node 0: every other node's latest one in."""

    def stopped_elsewhere(self) -> NodeStop | None:
        """Another node's announcement for this attempt, looked at now (not throttled)."""

    def evidence_taken(self) -> None:
        """This node has taken its ranks' evidence of a hang: say so to the others."""

    def others_have_evidence(self, seconds: float) -> bool:
        """Wait, at most `seconds`, for every other node's evidence_taken."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankExit:
    """How one rank's process ended (returncode as Popen gives it: -N for signal N)."""

    rank: int
    local_rank: int
    pid: int | None
    returncode: int
    ended_after: float  # seconds after the attempt started
    log_path: Path
    error_file: Path
    start_error: str | None = None  # why the rank's command could not run
    skipped: bool = False  # never started: an earlier rank's command could not run


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptRecord:
    """What happened in one attempt, for the outcome stage to judge."""

    plan: LaunchPlan
    exits: tuple[RankExit, ...]
    teardown_after: float | None  # when safelaunch began stopping ranks itself
    teardown_cause: TeardownCause | None
    interrupt_signal: int | None
    hang: HangEvidence | None
    strays_ended: int
    log_problems: tuple[str, ...]
    duration: float
    timebox_note: str | None = None  # why an isolation rerun was stopped early
    peer_event: NodeStop | None = None  # multi-node: why another node made this one stop
    survivors: Survivors | None = None  # a failure: where the other ranks were, before teardown
    hang_deadline: Deadline | None = None  # the hang watch's at the end; None: detection off


def open_attempt_logs(plan: LaunchPlan, console: Console) -> bool:
    """Create the attempt directory and launcher.log; False (with a warning) if impossible."""
    try:
        plan.attempt_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(
            rank_logs.launcher_log(plan.attempt_dir),
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
        )
    except OSError as exc:
        console.say(
            f"cannot write logs under {plan.attempt_dir}: {exc.strerror}; "
            "the job runs with console output only",
            Level.WARNING,
        )
        return False
    console.attach_log(fd)
    return True
