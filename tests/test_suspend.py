"""A job suspended whole is not hung: time the launcher did not see pass is no evidence.

SIGSTOP of the launcher and its ranks (SLURM's `scontrol suspend`), or a laptop's sleep:
the ranks' records and output stand still, and so does the launcher. Replayed first on
a fake clock (HangWatch polled as the loop polls it, the ranks' progress picked up by the
launcher a moment after they make it, as the tee threads do), then once for real.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Literal

import pytest
from conftest import console_lines, marked_processes, start, wait_for
from test_supervisor_replay import FakeClock  # a sleep moves its wall_offset only

from safelaunch.hangs.analysis import _group, silent_for
from safelaunch.hangs.detection import (
    HangEvidence,
    RankProgress,
    Unseen,
    is_hung,
    is_stale,
    stale_after,
)
from safelaunch.rundir.heartbeat_file import Beat
from safelaunch.supervisor.watchers import HangWatch, Lookout, StopReason, late_slack

TIMEOUT = 2.0
INTERVAL = 0.2  # the heartbeat interval of a 2 s timeout (plan.heartbeat_interval)
PACE = 0.2  # the loop's tick (0.1 s) plus the throttle (half the interval, 0.1 s at least)
STEP = 0.1  # the replay's resolution
EVERY = 0.2  # a working rank shows progress this often
LAG = 0.3  # after a rank's progress (or the launcher's resume) until the launcher sees it

Ranks = Literal["work", "hung", "stopped"]


class PlainWatch:
    """The rule as it was before: every wall-clock age counts."""

    def __init__(self, clock: FakeClock, job: Job) -> None:
        self._clock, self._job = clock, job

    def poll(self, now: float) -> object | None:
        hung = is_hung(self._job.progress(), self._clock.wall(), TIMEOUT, INTERVAL)
        return True if hung else None


class Job:
    """Two ranks and a launcher on the fake clocks; `hung_at`: wall time a hang was declared."""

    def __init__(self, plain: bool = False) -> None:
        self.clock = FakeClock()
        start = self.clock.wall()
        self.seen = {0: start, 1: start}  # each rank's last progress the launcher has seen
        self.pending: list[tuple[float, int, float]] = []  # (seen at, rank, made at)
        self.last_made = start
        self.hung_at: float | None = None
        self.reason: StopReason | None = None  # what the watch said when it declared the hang
        self.resumed_at: float | None = None
        self._next_progress = start + EVERY
        self._next_poll = self.clock.t
        self._launcher_ran = True
        self.watch = (
            PlainWatch(self.clock, self)
            if plain
            else HangWatch(
                clock=self.clock,
                progress=self.progress,
                sample=lambda: None,
                sample_every=0.5,
                timeout=TIMEOUT,
                interval=INTERVAL,
                pace=PACE,
            )
        )

    def progress(self) -> list[RankProgress]:
        return [
            RankProgress(rank=r, last_progress=t, beat=None, heartbeat=False)
            for r, t in self.seen.items()
        ]

    def advance(
        self, seconds: float, ranks: Ranks = "work", launcher: bool = True, asleep: bool = False
    ) -> None:
        """`seconds` of the job's life; `asleep`: the machine slept (nothing ran)."""
        for _ in range(round(seconds / STEP)):
            if asleep:  # CLOCK_MONOTONIC stands still while the machine sleeps
                self.clock.wall_offset += STEP
            else:
                self.clock.t += STEP
            wall = self.clock.wall()
            if ranks == "work" and not asleep and wall >= self._next_progress - 1e-9:
                self.pending += [(wall + LAG, r, wall) for r in self.seen]
                self.last_made = wall
                self._next_progress = wall + EVERY
            elif ranks != "work":
                self._next_progress = wall + EVERY
            runs = launcher and not asleep
            if runs and not self._launcher_ran:  # resumed: the tees read what waited
                self.resumed_at = wall
                self.pending = [(max(s, wall + LAG), r, m) for s, r, m in self.pending]
                self._next_poll = self.clock.t  # the loop's wait has long expired
            self._launcher_ran = runs
            if runs:
                self._look()

    def _look(self) -> None:
        wall = self.clock.wall()
        for _, rank, made in [p for p in self.pending if p[0] <= wall + 1e-9]:
            self.seen[rank] = max(self.seen[rank], made)
        self.pending = [p for p in self.pending if p[0] > wall + 1e-9]
        if self.clock.t >= self._next_poll - 1e-9 and self.hung_at is None:
            self._next_poll = self.clock.t + PACE
            reason = self.watch.poll(self.clock.t)
            if reason is not None:
                self.hung_at = wall
                self.reason = reason if isinstance(reason, StopReason) else None


def _stopped_whole(job: Job, seconds: float) -> Job:
    job.advance(3)
    job.advance(seconds, ranks="stopped", launcher=False)
    return job


@pytest.mark.parametrize("timeouts", [1.5, 3, 10, 100])
def test_a_job_stopped_whole_for_many_timeouts_is_not_hung(timeouts: float) -> None:
    job = _stopped_whole(Job(), timeouts * TIMEOUT)
    job.advance(6)
    assert job.hung_at is None
    # the same history fooled the rule that counts every wall-clock second (the audit)
    plain = _stopped_whole(Job(plain=True), timeouts * TIMEOUT)
    plain.advance(6)
    assert plain.hung_at == plain.resumed_at


def test_a_machine_that_slept_is_not_hung() -> None:
    """A laptop's sleep: wall time jumps, CLOCK_MONOTONIC does not (so it alone would miss it)."""
    job = Job()
    job.advance(3)
    mono = job.clock.monotonic()
    job.advance(600, ranks="stopped", launcher=False, asleep=True)
    assert job.clock.monotonic() == mono
    job.advance(6)
    assert job.hung_at is None
    plain = Job(plain=True)
    plain.advance(3)
    plain.advance(600, ranks="stopped", launcher=False, asleep=True)
    plain.advance(6)
    assert plain.hung_at is not None


@pytest.mark.parametrize("first", ["ranks", "launcher"])
def test_resumed_a_second_apart_either_way_is_not_hung(first: str) -> None:
    job = _stopped_whole(Job(), 12)
    if first == "ranks":
        job.advance(1, ranks="work", launcher=False)
    else:
        job.advance(1, ranks="stopped", launcher=True)
    job.advance(6)
    assert job.hung_at is None


def test_progress_between_repeated_suspends_is_never_a_hang() -> None:
    """Gang scheduling suspends a job every few seconds, for days."""
    job = Job()
    for _ in range(60):
        job.advance(2)
        job.advance(5, ranks="stopped", launcher=False)
    job.advance(4)
    assert job.hung_at is None


def _hang_lag(job: Job) -> float:
    job.advance(10, ranks="hung")
    assert job.hung_at is not None
    return job.hung_at - job.last_made


def test_a_hang_after_a_resume_is_detected_as_fast_as_without_the_stop() -> None:
    job = _stopped_whole(Job(), 20)
    job.advance(1)
    lag = _hang_lag(job)
    calm = Job()
    calm.advance(4)
    usual = _hang_lag(calm)
    assert TIMEOUT < usual <= TIMEOUT + PACE + STEP
    assert lag == pytest.approx(usual, abs=1e-6)


def test_a_hang_from_before_the_stop_is_detected_once_the_ranks_had_time_to_show_progress() -> None:
    job = Job()
    job.advance(3)
    job.advance(1, ranks="hung")  # hung a second before the suspend
    job.advance(20, ranks="stopped", launcher=False)
    resumed = job.clock.wall() + STEP
    job.advance(10, ranks="hung")
    assert job.hung_at is not None
    # not before the ranks had a heartbeat's staleness bound to show progress, and no later
    # than the timeout's remainder (or that bound) plus one poll
    after = job.hung_at - resumed
    assert stale_after(INTERVAL) <= after <= max(TIMEOUT - 1, stale_after(INTERVAL)) + PACE


@pytest.mark.parametrize("late", [0.5, 0.9])
def test_a_slow_launcher_that_was_not_stopped_detects_as_before(late: float) -> None:
    """Ticks late by less than the slack (a loaded machine): no time is counted unseen."""
    lags = []
    for plain in (False, True):
        job = Job(plain=plain)
        job.advance(2)
        for _ in range(8):
            job.advance(late, ranks="hung", launcher=False)
            job.advance(STEP, ranks="hung")
        lags.append(_hang_lag(job))
    assert lags[0] == lags[1]


def test_ranks_stopped_alone_are_still_a_hang_as_before() -> None:
    lags = []
    for plain in (False, True):
        job = Job(plain=plain)
        job.advance(2)
        job.advance(10, ranks="stopped")
        assert job.hung_at is not None
        lags.append(job.hung_at)
    assert lags[0] == lags[1]


# --- the pure parts ------------------------------------------------------------------


def test_a_hang_that_spans_a_suspend_reports_the_time_the_ranks_had_not_the_suspends() -> None:
    """Hung a second before a 20 s suspend: "no progress for X s" (the report's stuck_for)
    and a frozen rank's silence leave the 20 s out, from the launcher's view of it."""
    job = Job()
    job.advance(3)
    last = job.last_made
    job.advance(1, ranks="hung")
    job.advance(20, ranks="stopped", launcher=False)
    job.advance(10, ranks="hung")
    assert job.hung_at is not None and job.reason is not None
    assert job.hung_at - last > 20  # by the wall clock
    seen = job.reason.unseen.age(last, job.hung_at)
    assert TIMEOUT <= seen <= TIMEOUT + 2 * PACE + LAG + 1  # the time the ranks ran hung
    beat = Beat(rank=0, time=last, since=last, frames=(("x.py", 1, "f"),), step=None, seq=3)
    evidence = HangEvidence(
        detected_at=job.hung_at,
        timeout=TIMEOUT,
        interval=INTERVAL,
        ranks=(RankProgress(rank=0, last_progress=last, beat=beat),),
        states={0: "S"},
        stack_files={},
        unseen=job.reason.unseen,
    )
    assert silent_for(evidence, last) == pytest.approx(seen)
    (group,) = _group(evidence)
    assert group.frozen is not None and f"no heartbeat for {seen:.1f} s" in group.frozen


def test_unseen_time_is_left_out_of_ages() -> None:
    unseen = Unseen(((10.0, 20.0), (30.0, 31.0)))
    assert unseen.age(5.0, 40.0) == 35.0 - 11.0
    assert unseen.age(15.0, 25.0) == 5.0  # from inside a span: only what was seen after it
    assert unseen.age(21.0, 25.0) == 4.0
    assert unseen.after(20.0).spans == ((30.0, 31.0),)
    beat = Beat(rank=0, time=5.0, since=5.0, frames=(), step=None, seq=None)
    ranks = [RankProgress(rank=0, last_progress=5.0, beat=beat)]
    assert is_hung(ranks, 21.0, timeout=10, interval=0.2)
    assert not is_hung(ranks, 21.0, timeout=10, interval=0.2, unseen=unseen)
    written = Beat(rank=0, time=9.5, since=5.0, frames=(), step=None, seq=None)
    assert is_stale(written, 20.5, interval=0.2)  # 11 s late, 10 of them unseen
    assert not is_stale(written, 20.5, 0.2, unseen)


def test_lookout_counts_only_the_time_past_its_pace_and_forgets_what_no_age_needs() -> None:
    lookout = Lookout(pace=0.2, slack=late_slack(TIMEOUT), settle=1.1)
    for t in (0.0, 0.2, 0.4, 1.5):  # 1.1 s apart: late, but within pace + slack
        lookout.look(t)
    assert lookout.unseen.spans == ()
    lookout.look(11.6)
    assert lookout.unseen.spans == ((1.7, 11.6),)
    assert lookout.settling(12.6) and not lookout.settling(12.8)
    lookout.forget_before(11.0)
    assert lookout.unseen.spans == ((1.7, 11.6),)
    lookout.forget_before(11.6)
    assert lookout.unseen.spans == ()
    assert late_slack(300) == 5.0 and late_slack(1.5) == 1.0


# --- for real ------------------------------------------------------------------------

TICKS = """\
import os, sys, time
rank = os.environ["RANK"]
for i in range(30):
    print(f"tick {i}", flush=True)
    if i == 5:
        open(os.path.join(os.environ["PIDS_DIR"], f"ticking-{rank}"), "w").close()
    time.sleep(0.2)
"""


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return "gone"
    return stat[stat.rfind(b")") + 2 :][:1].decode()


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


@pytest.mark.slow
def test_a_job_stopped_whole_longer_than_the_timeout_finishes(tmp_path: Path) -> None:
    """Launcher, keeper and ranks SIGSTOPped for 5 s with --hang-timeout 2, then SIGCONTed
    (what `scontrol suspend` / `resume` do): the job finishes, exit 0, no hang."""
    script = tmp_path / "ticks.py"
    script.write_text(TICKS)
    proc, mark = start(tmp_path, "--nproc-per-node=2", "--hang-timeout=2", str(script), text=True)
    stopped: list[int] = []
    try:
        pids = tmp_path / "pids"
        wait_for(lambda: all((pids / f"ticking-{r}").exists() for r in (0, 1)), 60, "ticks")
        # the launcher first, then the rest of the tree (keeper, ranks), as a suspend does
        stopped = [proc.pid, *sorted(marked_processes(mark) - {proc.pid})]
        _signal_all(stopped, signal.SIGSTOP)
        wait_for(lambda: all(_state(p) in ("T", "gone") for p in stopped), 10, "the stop")
        assert len(stopped) >= 4, stopped  # launcher, keeper, two ranks
        time.sleep(5.0)  # the feature: 2.5 times the timeout without the launcher seeing it
    finally:
        _signal_all(stopped, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "HUNG" not in err and "hang:" not in err, err
    for rank in (0, 1):
        assert console_lines(out, rank) == [f"tick {i}" for i in range(30)], out
