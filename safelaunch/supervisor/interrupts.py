"""When ranks' endings and a signal to the launcher are one interrupt (rules; the loop acts).

Inside an srun step SLURM (scancel, `--signal`, a time limit) signals every process of
the step, the ranks included, within milliseconds and in either order. A rank that dies
of that signal a moment before the launcher's own copy arrives was not a failure: the
attempt is interrupted, and the ranks it ended are stopped, like those safelaunch stopped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from safelaunch.rendezvous.stops import NodeStop, StopKind
from safelaunch.supervisor.teardown import TeardownCause

OWN_SIGNAL_WAIT = 1.0  # every rank died of SIGTERM & co: the launcher's copy is due within this


def ended_by(signum: int, returncode: int) -> bool:
    """Killed by the signal (-N), or exited 128 + N as handlers that re-raise it do."""
    return returncode in (-signum, 128 + signum)


def signal_explains(
    signum: int,
    cause: TeardownCause | None,
    failed_codes: Sequence[int],
    peer_event: NodeStop | None,
) -> bool:
    """The teardown under way was started by this very signal reaching the ranks first.

    This node's ranks: every failure so far is a death by it. Another node's (multi-node,
    "peer"): that node announced an interrupt by it, or a rank ending of it.
    """
    if cause is TeardownCause.PEER:
        if peer_event is None or peer_event.code is None:
            return False
        if peer_event.kind is StopKind.INTERRUPTED:
            return peer_event.code == signum
        return peer_event.kind is StopKind.RANK_FAILED and ended_by(signum, peer_event.code)
    return (
        cause is TeardownCause.RANK_FAILED
        and bool(failed_codes)
        and all(ended_by(signum, code) for code in failed_codes)
    )


def expects_own_signal(
    cause: TeardownCause | None, failed_codes: Sequence[int], stopping: Iterable[int]
) -> bool:
    """Every failure is a death by a signal the launcher handles: its own copy may follow."""
    handled = tuple(stopping)
    return (
        cause is TeardownCause.RANK_FAILED
        and bool(failed_codes)
        and all(any(ended_by(s, code) for s in handled) for code in failed_codes)
    )


def stopped_from(signum: int, teardown_after: float, ended: Iterable[tuple[int, float]]) -> float:
    """The teardown's start, moved back to the first rank that died of the same signal.

    `ended`: (returncode, seconds after the attempt started) of every rank that ended.
    """
    times = [after for code, after in ended if ended_by(signum, code)]
    return min([teardown_after, *times])
