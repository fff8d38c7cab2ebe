"""The learned hang deadline (hangs/rhythm.py) over generated interval sequences.

A generator of healthy rhythms (step times, spreads, a slow first step, recurring pauses,
a slowly growing step time) and of stops: a healthy sequence never outlasts the deadline
computed before each gap, and a job that stops is caught within the target (3 x the
median gap + 10 s, less the watch's own lag).
"""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from safelaunch import defaults
from safelaunch.hangs.detection import RankProgress, Unseen
from safelaunch.hangs.rhythm import (
    FLOOR_S,
    WARMUP_GAPS,
    WARMUP_STEPS,
    Basis,
    Learner,
    Rhythm,
    deadline,
    learned,
    quantile,
)
from safelaunch.rundir.heartbeat_file import Beat
from safelaunch.supervisor.watchers import HangWatch, PeerHang

# what the watch adds to the deadline before it declares: a heartbeat interval (auto: 1 s)
# before a stopped rank's record shows it, the file-read throttle (0.5 s), a tick
WATCH_LAG_S = 2.0


def healthy(
    seed: int,
    *,
    steps: int,
    step_s: float,
    spread: float,
    first_s: float,
    pause_every: int,
    pause_s: float,
    growth: float,
) -> list[float]:
    """One rank's quiet gaps: lognormal steps of `spread` around `step_s`, growing by
    `growth` a step; a first step of `first_s`; every `pause_every` steps a pause of about
    `pause_s` (+-20%), the first one shown within the warm-up (so "of a kind seen before").

    Healthy by construction: a step time lognormal around its trend (sigma <= 0.3, cut
    at 2.5 sigma: within x/÷ 2.1), growing 1% a step at most, and no long phase whose first
    showing outlasts the fixed default (which would kill it today as well)."""
    rng = random.Random(seed)
    gaps = [first_s]
    for i in range(1, steps):
        noise = max(-2.5, min(2.5, rng.gauss(0, 1)))  # a tail past 2.5 sigma is no rhythm
        gap = step_s * (1 + growth) ** i * math.exp(spread * noise)
        if pause_every and i % pause_every == min(3, pause_every - 1):
            gap = max(gap, pause_s * rng.uniform(0.8, 1.2))
        gaps.append(gap)
    return gaps


rhythms = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**32),
        "steps": st.integers(1, 250),
        "step_s": st.floats(0.05, 120),
        "spread": st.floats(0, 0.3),
        # a long phase's first showing must fit in the fixed default, as it must today
        "first_s": st.floats(0.05, 290),
        "pause_every": st.sampled_from([0, 5, 20, 50]),
        "pause_s": st.floats(0, 240),
        "growth": st.floats(0, 0.01),
    }
)


@settings(max_examples=100, deadline=None)
@given(rhythms)
def test_a_healthy_rhythm_never_outlasts_its_deadline(shape: dict[str, object]) -> None:
    gaps = healthy(**shape)  # type: ignore[arg-type]
    rhythm = Rhythm()
    for gap in gaps:
        rhythm = rhythm.with_step()
        allowed = deadline(rhythm)
        assert gap < allowed.seconds, (gap, allowed, rhythm.gaps)
        rhythm = rhythm.with_gap(gap)


steady = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**32),
        "steps": st.integers(WARMUP_GAPS + 1, 250),
        "step_s": st.floats(0.05, 120),
        "spread": st.floats(0, 0.15),
        "first_s": st.floats(0.05, 2),
        "pause_every": st.just(0),
        "pause_s": st.just(0.0),
        "growth": st.just(0.0),
    }
)


@settings(max_examples=100, deadline=None)
@given(steady)
def test_a_stop_is_caught_within_three_median_gaps_and_ten_seconds(
    shape: dict[str, object],
) -> None:
    gaps = healthy(**shape)  # type: ignore[arg-type]
    rhythm = learned(gaps, steps=len(gaps))
    allowed = deadline(rhythm)
    median = quantile(rhythm.recent, 0.5)
    assert allowed.seconds >= FLOOR_S
    assert allowed.seconds + WATCH_LAG_S <= 3 * median + 10, (allowed, median)


def test_until_the_rhythm_is_known_the_fixed_default_holds() -> None:
    short = learned([0.3] * 100, steps=WARMUP_STEPS - 1)  # no steps: no rhythm
    assert deadline(short).seconds == defaults.HANG_TIMEOUT_S
    assert deadline(short).basis is Basis.WARMUP
    few = learned([0.3] * (WARMUP_GAPS - 1), steps=100)
    assert deadline(few).seconds == defaults.HANG_TIMEOUT_S
    # a first step longer than the default: 1.5 x that, already in warm-up
    slow_first = learned([400.0, 0.3], steps=2)
    assert deadline(slow_first).seconds == 600.0
    known = learned([0.3] * WARMUP_GAPS, steps=WARMUP_STEPS)
    assert (deadline(known).seconds, deadline(known).basis) == (FLOOR_S, Basis.FLOOR)


def test_a_long_phase_shown_once_is_allowed_again() -> None:
    gaps = [1.0] * 30 + [60.0] + [1.0] * 200
    allowed = deadline(learned(gaps, steps=len(gaps)))
    assert (allowed.seconds, allowed.basis) == (90.0, Basis.LONGEST)
    assert "longest gap 60" in allowed.why


def _beat(rank: int, seq: int, since: float) -> Beat:
    return Beat(
        rank=rank, time=since, since=since, frames=(("t.py", 1, "main"),), step=None, seq=seq
    )


def test_the_learner_measures_gaps_between_progress_and_leaves_unseen_time_out() -> None:
    learner = Learner()
    t = 1000.0
    for i in range(40):
        t += 2.0
        progress = [RankProgress(rank=0, last_progress=t, beat=_beat(0, i, t))]
        learner.observe(progress)
        learner.observe(progress)  # a look that sees no new progress closes no gap
    assert learner.rhythm(0).gaps == 39 and learner.rhythm(0).steps == 39
    assert quantile(learner.rhythm(0).recent, 0.5) == 2.0
    # a 100 s suspend between two progress events is no quiet gap of the job's
    suspended = Unseen(((t + 1, t + 101),))
    t += 102
    learner.observe([RankProgress(rank=0, last_progress=t, beat=_beat(0, 41, t))], suspended)
    assert learner.rhythm(0).longest == 2.0
    # the job's deadline: the widest of its ranks'; a rank without a heartbeat keeps warm-up
    ranks = [RankProgress(rank=0, last_progress=t, beat=_beat(0, 41, t))]
    assert learner.deadline(ranks).seconds == FLOOR_S
    silent = RankProgress(rank=1, last_progress=t, beat=None, heartbeat=False)
    assert learner.deadline([*ranks, silent]).seconds == defaults.HANG_TIMEOUT_S


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.t + 1_700_000_000.0


def _caught_after(peers: dict[int, PeerHang | None] | None, stop_at: float = 40.0) -> float | None:
    """A rank stepping every second until `stop_at`: seconds from its last step to the hang."""
    clock = _Clock()
    state = {"t": clock.wall(), "seq": 0}

    def progress() -> list[RankProgress]:
        if clock.t - 100 < stop_at and clock.wall() - state["t"] >= 1.0:
            state["t"], state["seq"] = clock.wall(), state["seq"] + 1
        beat = _beat(0, int(state["seq"]), state["t"])
        return [RankProgress(rank=0, last_progress=state["t"], beat=beat)]

    watch = HangWatch(
        clock=clock,
        progress=progress,
        sample=lambda: None,
        sample_every=1.0,
        timeout=defaults.HANG_TIMEOUT_S,
        interval=1.0,
        pace=0.6,
        auto=True,
        peers=None if peers is None else (lambda: peers),
    )
    for _ in range(2000):  # a look every half second, 1000 s
        clock.t += 0.5
        if watch.poll(clock.t) is not None:
            return clock.wall() - state["t"]
    return None


def test_the_watch_applies_the_learned_deadline_and_waits_for_other_nodes() -> None:
    alone = _caught_after(None)
    assert alone is not None and FLOOR_S <= alone <= FLOOR_S + 1.5
    # another node's longer deadline holds here too; one not heard from: the fixed default
    slower = _caught_after({1: PeerHang(deadline=30.0, quiet=1000.0)})
    assert slower is not None and 30.0 <= slower <= 31.5
    unheard = _caught_after({1: None})
    assert unheard is not None and 300.0 <= unheard <= 301.5
    # another node's ranks still progress: no hang on its behalf before the fixed default
    busy = _caught_after({1: PeerHang(deadline=FLOOR_S, quiet=0.5)})
    assert busy is not None and 300.0 <= busy <= 301.5
