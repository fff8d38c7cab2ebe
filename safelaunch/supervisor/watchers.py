"""The loop's periodic checks as watchers: each says, when polled, why the ranks must stop.

The loop polls them with the time from an injected clock and acts on what they return
(stack collection, signals, announcements); a watcher only reads. A replayed-event test
drives them with a fake clock and scripted sources (tests/test_supervisor_replay.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from safelaunch.hangs.detection import (
    ALL_SEEN,
    RankProgress,
    Unseen,
    is_hung,
    passed_point,
    stale_after,
)
from safelaunch.hangs.rhythm import FLOOR_S, Basis, Deadline, Learner, fixed
from safelaunch.plan import Timebox
from safelaunch.rendezvous.stops import NodeStop, StopKind
from safelaunch.rundir.heartbeat_file import Beat
from safelaunch.supervisor.teardown import TeardownCause


class Clock(Protocol):
    """Monotonic time for deadlines and throttles; wall time for heartbeats (files)."""

    def monotonic(self) -> float: ...

    def wall(self) -> float: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


class PeerPoll(Protocol):
    def poll(self) -> NodeStop | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReason:
    """Why a watcher wants the ranks stopped, with what the loop needs to act on it."""

    cause: TeardownCause
    say: str = ""  # the console line (a hang's is written where its stacks are taken)
    note: str | None = None  # an isolation rerun's: why it was stopped early
    peer_event: NodeStop | None = None  # what another node announced (or: it vanished)
    progress: tuple[RankProgress, ...] = ()  # a hang: every live rank's last progress
    detected_at: float = 0.0  # a hang: wall time
    unseen: Unseen = ALL_SEEN  # a hang: time the launcher did not see pass (a suspend)


class Throttle:
    """At most one look per `every` seconds (the first look is due at once)."""

    def __init__(self, every: float) -> None:
        self.every = every
        self._next = 0.0

    def due(self, now: float) -> bool:
        if now < self._next:
            return False
        self._next = now + self.every
        return True


IDLE_CAP = 1.0  # s: with nothing to look at, the loop still wakes every half second


def idle_wait(monitor_interval: float, paces: Sequence[float]) -> float:
    """How long the loop sleeps while the ranks run: until a rank ends or a signal comes
    (Workers.wake), or half the shortest pace of its own looks has passed (another node's
    news, a hang, the live state: 0.5-1 s each by default), so each look comes at most a
    half-pace late; never shorter than --monitor-interval, as torchrun's agent polls.

    torchrun polls its workers every 0.1 s; a wake costs ~36 us of CPU on a VM before any
    work, and the loop's looks at 0.1 s were ~1 ms/s of a launcher (docs/scale.md)."""
    return max(monitor_interval, min(min(paces, default=IDLE_CAP), IDLE_CAP) / 2)


class Watcher(Protocol):
    def poll(self, now: float) -> StopReason | None: ...


def poll_all(
    every_tick: Sequence[Watcher], throttled: Sequence[Watcher], throttle: Throttle, now: float
) -> StopReason | None:
    """The first reason to stop; throttled watchers share one throttle (cost: file reads)."""
    for watcher in every_tick:
        reason = watcher.poll(now)
        if reason is not None:
            return reason
    if throttled and throttle.due(now):
        for watcher in throttled:
            reason = watcher.poll(now)
            if reason is not None:
                return reason
    return None


def late_slack(timeout: float) -> float:
    """How much later than its pace a look may come before the launcher counts as stopped.

    A second at least: a loaded machine delays a tick that long at times (a look counted
    late only postpones a hang, never declares one). A quarter of a longer timeout, 5 s at
    most: an unseen stretch shorter than that adds too little to any age to matter.
    """
    return max(1.0, min(5.0, timeout / 4))


class Lookout:
    """Tells, from the gaps between the launcher's looks, when the launcher itself did not run.

    The loop looks every `pace` seconds (its tick plus the throttle). A look more than
    `slack` later than that means the launcher was stopped with the job (SIGSTOP, SLURM's
    `scontrol suspend`) or the machine slept: the time past its pace is unseen
    (hang.Unseen), and for `settle` seconds after such a resume no hang is declared, so
    that the tee threads and the ranks' heartbeat threads first catch up with what the
    ranks did (a check run at once read the output and records of before the stop).

    Wall time, the clock of the ages it corrects: CLOCK_MONOTONIC (the loop's `now`)
    stands still while the machine sleeps, so it would miss a sleep that grows every
    wall-clock age; a wall-clock step forward (NTP) grows the ages too and is caught alike.
    """

    def __init__(self, *, pace: float, slack: float, settle: float) -> None:
        self._pace = pace
        self._late = pace + slack
        self._settle = settle
        self._last: float | None = None
        self._settled_at = -math.inf
        self.unseen: Unseen = ALL_SEEN

    def look(self, wall: float) -> None:
        last, self._last = self._last, wall
        if last is not None and wall - last > self._late:
            self.unseen = Unseen((*self.unseen.spans, (last + self._pace, wall)))
            self._settled_at = wall + self._settle

    def settling(self, wall: float) -> bool:
        """Just resumed: the ranks still get time to show their progress."""
        return wall < self._settled_at

    def forget_before(self, earliest: float) -> None:
        self.unseen = self.unseen.after(earliest)


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerHang:
    """Another node's hang watch, as its last shared snapshot said: its deadline, and how
    long its ranks had then been without progress."""

    deadline: float
    quiet: float


# Snapshots are shared every 2 s at most; what a peer said may be this much behind.
SHARE_LAG = 5.0


class HangWatch:
    """No live rank made progress for the hang deadline (rules in hangs/detection.py).

    `progress`: every live rank's latest sign of progress; `sample`: a pass over /proc that
    updates the ranks' activity (costly: at its own slower pace, `sample_every`); `pace`:
    how far apart the loop's polls are at most when it runs (its tick plus the throttle).
    Time the launcher did not run is left out of the ages (Lookout).

    `auto`: the deadline is learned from the ranks' rhythm (hangs/rhythm.py), `timeout`
    being the fixed one that holds until it is known. `peers` (several nodes, auto): what
    every other node's watch last said, None for one not heard from yet (its deadline is
    then taken as the fixed one): this node waits as long as the longest, and declares no
    hang while another node's ranks still progress, until its own ranks have been quiet
    longer than the fixed timeout too.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        progress: Callable[[], list[RankProgress]],
        sample: Callable[[], None],
        sample_every: float,
        timeout: float,
        interval: float,
        pace: float = 0.0,
        auto: bool = False,
        peers: Callable[[], Mapping[int, PeerHang | None]] | None = None,
    ) -> None:
        self._clock = clock
        self._progress = progress
        self._sample = sample
        self._sampling = Throttle(sample_every)
        self._timeout = timeout
        self._interval = interval
        self._learner = Learner(timeout) if auto else None
        self._peers = peers
        self.deadline = self._learner.deadline(()) if self._learner else fixed(timeout)
        # the last deadline of the ranks' rhythm, before any began to exit (report.json)
        self.learned = self.deadline
        self.quiet = 0.0  # how long this node's ranks have been without progress, at the last look
        # at least one heartbeat interval after a resume: as long as a record may be late
        settle = stale_after(interval)
        slack = late_slack(min(timeout, FLOOR_S) if auto else timeout)
        self._lookout = Lookout(pace=pace, slack=slack, settle=settle)

    def poll(self, now: float) -> StopReason | None:
        self._lookout.look(self._clock.wall())
        if self._sampling.due(now):
            self._sample()
        if self._lookout.settling(self._clock.wall()):
            return None
        progress = self._progress()
        wall = self._clock.wall()
        unseen = self._lookout.unseen
        ages = [unseen.age(r.last_progress, wall) for r in progress]
        self.quiet = max(0.0, min(ages, default=0.0))
        if self._learner is not None and progress:  # none live: the last deadline stands
            self._learner.observe(progress, unseen)
            self.deadline = self._with_peers(self._learner.deadline(progress))
            if not any(r.beat is not None and r.beat.final for r in progress):
                self.learned = self.deadline
        hung = is_hung(progress, wall, self.deadline.seconds, self._interval, unseen)
        if not hung or self._peer_progresses():
            self._lookout.forget_before(_earliest(progress, wall))
            return None
        return StopReason(
            cause=TeardownCause.HANG, progress=tuple(progress), detected_at=wall, unseen=unseen
        )

    def _with_peers(self, own: Deadline) -> Deadline:
        if self._peers is None:
            return own
        for node, peer in sorted(self._peers().items()):
            seconds = self._timeout if peer is None else peer.deadline
            if seconds > own.seconds:
                said = "not heard from yet: the default" if peer is None else f"{seconds:.3g} s"
                own = Deadline(seconds=seconds, basis=Basis.PEER, why=f"node {node}'s ({said})")
        return own

    def _peer_progresses(self) -> bool:
        """Another node's ranks progressed lately: no hang declared here on its behalf,
        unless this node's ranks have been quiet past the fixed timeout too."""
        if self._peers is None or self.quiet > max(self._timeout, self.deadline.seconds):
            return False
        threshold = self.deadline.seconds - SHARE_LAG
        return any(p is not None and p.quiet < threshold for p in self._peers().values())


def _earliest(progress: Sequence[RankProgress], wall: float) -> float:
    """The oldest time any rule still measures an age from."""
    times = [r.last_progress for r in progress] + [r.beat.time for r in progress if r.beat]
    return min(times, default=wall)


class PeerWatcher:
    """Multi-node: another node stopped or vanished; a hang there is looked for here too."""

    def __init__(
        self, *, clock: Clock, peers: PeerPoll, progress: Callable[[], list[RankProgress]]
    ) -> None:
        self._clock = clock
        self._peers = peers
        self._progress = progress

    def poll(self, now: float) -> StopReason | None:
        event = self._peers.poll()
        if event is None:
            return None
        progress = self._progress()
        # a hang elsewhere: where are this node's ranks? the culprit may be here
        if event.kind is StopKind.HANG and progress:
            return StopReason(
                cause=TeardownCause.HANG,
                peer_event=event,
                progress=tuple(progress),
                detected_at=self._clock.wall(),
            )
        return peer_stop(event)


def peer_stop(event: NodeStop) -> StopReason:
    """Stop this node's ranks because another node stopped the attempt (or vanished)."""
    return StopReason(
        cause=TeardownCause.PEER, peer_event=event, say=f"stopping this node's ranks: {event.shown}"
    )


class TimeboxWatch:
    """An isolation rerun: stop it once clearly past where the job failed, or at its cap."""

    def __init__(
        self, *, box: Timebox, started_at: float, beats: Callable[[], list[Beat | None]]
    ) -> None:
        self._box = box
        self._t0 = started_at
        self._beats = beats  # the live ranks' latest heartbeats

    def poll(self, now: float) -> StopReason | None:
        beats = self._beats()
        if not beats:
            return None
        note = passed_point(self._box, beats, now - self._t0)
        if note is not None:
            return StopReason(
                cause=TeardownCause.PASSED,
                note=note,
                say=f"isolation: {note}: stopping the rerun, it has shown enough",
            )
        if now - self._t0 >= self._box.cap_s:
            note = f"still running at the {self._box.cap_s:g} s cap (--isolate-timeout)"
            return StopReason(
                cause=TeardownCause.TIMEBOX, note=note, say=f"isolation: {note}: stopping the rerun"
            )
        return None
