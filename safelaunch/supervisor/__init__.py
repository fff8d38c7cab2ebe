"""Supervisor: spawn the ranks, tee their output, watch them, leave no process behind."""

from safelaunch.hangs.detection import HangEvidence, RankProgress
from safelaunch.rundir.heartbeat_file import Beat
from safelaunch.supervisor.attempt_record import (
    AttemptRecord,
    PeerWatch,
    RankExit,
    open_attempt_logs,
)
from safelaunch.supervisor.keeper import Keeper
from safelaunch.supervisor.procs import become_subreaper
from safelaunch.supervisor.signals import SignalReceiver

__all__ = [
    "AttemptRecord",
    "Beat",
    "HangEvidence",
    "Keeper",
    "PeerWatch",
    "RankExit",
    "RankProgress",
    "SignalReceiver",
    "become_subreaper",
    "open_attempt_logs",
]
