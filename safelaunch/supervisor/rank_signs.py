"""What the supervisor can see of its ranks: their progress, heartbeats and live view.

Reads only (heartbeat files, /proc, the tees' last output); the watchers and the live
state take it from here, so the loop keeps to starting, stopping and acting.
"""

from __future__ import annotations

from collections.abc import Mapping

from safelaunch.hangs.activity import ActivityWatch, TreeSampler
from safelaunch.hangs.detection import RankProgress, last_progress
from safelaunch.plan import LaunchPlan
from safelaunch.rundir import heartbeat_file
from safelaunch.rundir.heartbeat_file import Beat
from safelaunch.supervisor.attempt_record import RankExit
from safelaunch.supervisor.live import RankNow
from safelaunch.supervisor.spawn import StartedRank
from safelaunch.supervisor.tee import RankTee
from safelaunch.supervisor.watchers import Clock


class RankSigns:
    """The ranks as the loop keeps them (the same dicts, read as they change)."""

    def __init__(
        self,
        *,
        plan: LaunchPlan,
        clock: Clock,
        ranks: Mapping[int, StartedRank],
        exits: Mapping[int, RankExit],
        tees: Mapping[int, RankTee],
        spawned_at: Mapping[int, float],
        wall0: float,
    ) -> None:
        self._plan = plan
        self._clock = clock
        self._ranks = ranks
        self._exits = exits
        self._tees = tees
        self._spawned_at = spawned_at  # wall clock
        self._wall0 = wall0
        self._activity = ActivityWatch()
        self._trees = TreeSampler()

    def live(self) -> dict[int, StartedRank]:
        return {r: s for r, s in self._ranks.items() if r not in self._exits}

    def beats(self) -> list[Beat | None]:
        return [
            heartbeat_file.read(s.spec.rank, s.spec.heartbeat_file) for s in self.live().values()
        ]

    def sample(self) -> None:
        """A pass over /proc: which ranks' processes did work since the last one."""
        live = {r: s.process.pid for r, s in self.live().items()}
        beats = {r: heartbeat_file.read(r, self._ranks[r].spec.heartbeat_file) for r in live}
        usage = self._trees.sample(live, self._clock.monotonic())
        self._activity.update(usage, beats, self._clock.wall())

    def progress(self) -> list[RankProgress]:
        """Every live rank's latest sign of progress."""
        progress = []
        for rank, started in self.live().items():
            beat = heartbeat_file.read(rank, started.spec.heartbeat_file)
            last = last_progress(
                beat,
                self._tees[rank].last_output,
                self._spawned_at[rank],
                started.spec.bootstrapped,
                self._activity.last_work.get(rank),
            )
            progress.append(
                RankProgress(
                    rank=rank,
                    last_progress=last,
                    beat=beat,
                    heartbeat=started.spec.bootstrapped and self._plan.hang_timeout > 0,
                )
            )
        return progress

    def now(self) -> list[RankNow]:
        """Every rank as the supervisor sees it now, for the live state."""
        views = []
        for spec in self._plan.workers:
            started = self._ranks.get(spec.rank)
            ended = self._exits.get(spec.rank)
            tee = self._tees.get(spec.rank)
            bootstrapped = spec.bootstrapped and self._plan.hang_timeout > 0
            views.append(
                RankNow(
                    rank=spec.rank,
                    local_rank=spec.local_rank,
                    pid=started.process.pid if started is not None else None,
                    spawned_at=self._spawned_at.get(spec.rank) if started is not None else None,
                    bootstrapped=bootstrapped,
                    beat=heartbeat_file.read(spec.rank, spec.heartbeat_file)
                    if bootstrapped
                    else None,
                    last_output=tee.last_output if tee is not None else None,
                    returncode=ended.returncode if ended is not None else None,
                    ended_at=self._wall0 + ended.ended_after if ended is not None else None,
                )
            )
        return views
