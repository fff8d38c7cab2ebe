"""The watchers one attempt runs, and how long its loop sleeps between their looks.

Which watchers depends on the plan: the other nodes' news (several nodes), the hang rule
(--hang-timeout > 0), an isolation rerun's time box. The loop (loop.py) only polls them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from safelaunch.plan import LaunchPlan
from safelaunch.supervisor.attempt_record import PeerWatch
from safelaunch.supervisor.live import LiveState
from safelaunch.supervisor.rank_signs import RankSigns
from safelaunch.supervisor.watchers import (
    Clock,
    HangWatch,
    PeerHang,
    PeerWatcher,
    Throttle,
    TimeboxWatch,
    Watcher,
    idle_wait,
)

ACTIVITY_EVERY = 0.5  # seconds between looks at the ranks' process trees in /proc


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchSet:
    every_tick: tuple[Watcher, ...]  # polled at every wake (another node's news)
    throttled: tuple[Watcher, ...]  # at the shared throttle's pace (they read files)
    throttle: Throttle
    hang: HangWatch | None  # None when hang detection is off
    idle: float  # the loop's sleep while the ranks run (watchers.idle_wait)


def watch_set(
    *,
    plan: LaunchPlan,
    clock: Clock,
    signs: RankSigns,
    live: LiveState | None,
    peers: PeerWatch | None,
    started_at: float,
) -> WatchSet:
    """The attempt's watchers; with a live state, its hang watch is shown there too."""
    # hang and time-box checks read files: at most twice per heartbeat interval
    throttle = Throttle(max(0.1, plan.heartbeat_interval / 2))
    watched = plan.hang_timeout > 0 or plan.rerun is not None
    paces = [throttle.every] if watched else []
    paces += [live.every] if live is not None else []
    idle = idle_wait(plan.monitor_interval, paces + ([peers.pace] if peers is not None else []))
    every_tick: list[Watcher] = []
    throttled: list[Watcher] = []
    if peers is not None:
        every_tick.append(PeerWatcher(clock=clock, peers=peers, progress=signs.progress))
    hang = None
    if plan.hang_timeout > 0:
        heard = live.peer_hangs if live is not None else unheard(plan)
        hang = HangWatch(
            clock=clock,
            progress=signs.progress,
            sample=signs.sample,
            sample_every=max(ACTIVITY_EVERY, plan.heartbeat_interval),
            timeout=plan.hang_timeout,
            interval=plan.heartbeat_interval,
            pace=idle + throttle.every,
            auto=plan.hang_auto,
            peers=heard if peers is not None and plan.hang_auto else None,
        )
        if live is not None:
            live.hang = hang  # status shows the deadline; other nodes read it
        throttled.append(hang)
    if plan.rerun is not None:
        throttled.append(
            TimeboxWatch(box=plan.rerun.timebox, started_at=started_at, beats=signs.beats)
        )
    return WatchSet(
        every_tick=tuple(every_tick),
        throttled=tuple(throttled),
        throttle=throttle,
        hang=hang,
        idle=idle,
    )


def unheard(plan: LaunchPlan) -> Callable[[], dict[int, PeerHang | None]]:
    """No live state shared (no run directory): no other node is ever heard from."""
    nodes = int(plan.workers[0].env.get("GROUP_WORLD_SIZE", "1")) if plan.workers else 1
    return lambda: {n: None for n in range(nodes) if n != (plan.node or 0)}
