"""The attempt's teardown as one record and its transitions (Supervisor's change_state).

running -> stopping (a cause, the signal sent, one SIGKILL deadline) -> killed. The loop
sends the signals; these functions only say which state follows and when to kill. The
module depends on nothing but the vocabularies' base, so a replayed history of events
can drive it with a fake clock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from safelaunch.vocab import StrEnum


class TeardownCause(StrEnum):
    """Why safelaunch began stopping the ranks itself.

    The values are what report.json and the live state have always said: a str Enum so
    comparisons and JSON keep them as they were.
    """

    RANK_FAILED = "rank failed"
    SIGNAL = "signal"
    HANG = "hang"
    PEER = "peer"  # multi-node: another node stopped, or vanished
    PASSED = "passed"  # an isolation rerun went clearly past where the job failed
    TIMEBOX = "timebox"  # an isolation rerun reached its cap


class Phase(StrEnum):
    RUNNING = "running"
    STOPPING = "stopping"
    KILLED = "killed"


class SignalAct(StrEnum):
    """What a stopping signal to the launcher does."""

    BEGIN = "begin"  # start the teardown
    REACHED_FIRST = "reached first"  # turn the one under way into this interrupt
    NOTED = "noted"  # stopping already: note it
    KILL_NOW = "kill now"


@dataclass(frozen=True, slots=True)
class Teardown:
    """Where the attempt's teardown stands (times on the monotonic clock)."""

    phase: Phase = Phase.RUNNING
    began_at: float | None = None
    deadline: float | None = None  # SIGKILL once the clock passes it
    cause: TeardownCause | None = None
    signum: int | None = None  # the signal the ranks were sent first

    @property
    def running(self) -> bool:
        return self.phase == Phase.RUNNING


RUNNING = Teardown()


def begin(state: Teardown, cause: TeardownCause, signum: int, now: float, grace: float) -> Teardown:
    """Start stopping the ranks; the first cause wins (a later one changes nothing)."""
    if not state.running:
        return state
    return Teardown(Phase.STOPPING, now, now + grace, cause, signum)


def on_signal(state: Teardown, interrupted: bool, explains: bool) -> SignalAct:
    """A stopping signal arrived; `interrupted`: one already did; `explains`: it is what
    ended the ranks whose failures started the teardown (interrupts.signal_explains)."""
    if state.running:
        return SignalAct.BEGIN
    if not interrupted:
        return SignalAct.REACHED_FIRST if explains else SignalAct.NOTED
    return SignalAct.KILL_NOW


def tick(state: Teardown, now: float) -> tuple[Teardown, bool]:
    """The state after a look at the clock, and whether to SIGKILL the ranks now."""
    if state.phase == Phase.STOPPING and state.deadline is not None and now >= state.deadline:
        return replace(state, phase=Phase.KILLED), True
    return state, False


def kill_now(state: Teardown, now: float) -> Teardown:
    """The user asked again: the deadline is now (a killed state is killed once more)."""
    return replace(state, phase=Phase.STOPPING, deadline=now)


def recause(state: Teardown, cause: TeardownCause) -> Teardown:
    """The teardown under way turns out to have another cause (a signal that reached the
    ranks before the launcher: what looked like rank failures was that interrupt)."""
    return replace(state, cause=cause)


def moved_back(state: Teardown, began_at: float) -> Teardown:
    """The teardown counts as begun earlier (ranks the same interrupt ended before it)."""
    return replace(state, began_at=began_at)
