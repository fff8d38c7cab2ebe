"""The hang deadline learned from the attempt's own rhythm (`--hang-timeout auto`).

A fixed 300 s lets a job whose steps take 0.5 s stand hung for minutes, and kills a job
whose healthy quiet phases are longer. The hang rule (hangs/detection.py) measures how
long every rank has been without progress; this module learns, per rank and attempt,
how long those quiet gaps are when the job is healthy: the time between two successive
progress events the hang watch saw (a changed stack, step or collective count, output,
work of the rank's process tree), time the launcher did not see pass left out.

The rule (`deadline`), a pure function of what one rank has shown:
- warm-up: until the rank has taken WARMUP_STEPS steps (changes of its collective count,
  explicit step or optimizer step) and closed WARMUP_GAPS gaps, the deadline is the fixed
  default (300 s) or 1.5 x the longest gap seen, whichever is longer: the first step and
  compilation may take minutes, and a job with no collective and no step never leaves it;
- then the longest of: FLOOR_S; 3 x the median of the last WINDOW gaps; 2 x their 90th
  percentile; 1.5 x the longest gap the rank has ever shown (warm-up included: the first
  step, a checkpoint save, an evaluation). A long quiet phase of a kind shown before
  therefore never counts as a hang; one longer by half than any before may.

The job's deadline is the widest of its ranks' (`widest`), so a rank still warming up
keeps the fixed default for all; on several nodes each node learns from its own ranks
and waits at least as long as every other node's published deadline.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from safelaunch import defaults
from safelaunch.hangs.detection import ALL_SEEN, RankProgress, Unseen
from safelaunch.vocab import StrEnum

FLOOR_S = 7.0  # never shorter: a healthy job may pause briefly as a whole (GC, a slow disk)
WARMUP_STEPS = 8  # steps before the rhythm counts as known ...
WARMUP_GAPS = 10  # ... and quiet gaps closed (a gap needs two events to be measured)
WINDOW = 64  # the rhythm follows the recent gaps: a step time that grows slowly is followed
MEDIAN_FACTOR = 3.0
TAIL_QUANTILE = 0.9
TAIL_FACTOR = 2.0
LONGEST_FACTOR = 1.5


class Basis(StrEnum):
    """Which part of the rule set the deadline (report.json's `hang_deadline.basis`)."""

    FIXED = "fixed"  # --hang-timeout N: the user's
    WARMUP = "warm-up"  # the rhythm is not known yet
    FLOOR = "floor"
    MEDIAN = "median"
    TAIL = "tail"
    LONGEST = "longest"  # a long phase the job has shown before
    PEER = "peer"  # another node's deadline is longer


@dataclass(frozen=True, slots=True, kw_only=True)
class Deadline:
    """How long the job may show no progress before it counts as hung, and why."""

    seconds: float
    basis: Basis
    why: str
    auto: bool = True

    def shown(self) -> str:
        """As the console and status say it: `12 s (auto: 3 x the median gap 4.0 s)`."""
        mode = "auto" if self.auto else "--hang-timeout"
        return f"{self.seconds:.3g} s ({mode}: {self.why})"


def fixed(seconds: float) -> Deadline:
    return Deadline(seconds=seconds, basis=Basis.FIXED, why=f"{seconds:g} s as given", auto=False)


@dataclass(frozen=True, slots=True)
class Rhythm:
    """What one rank has shown so far: its recent quiet gaps, the longest, its steps."""

    recent: tuple[float, ...] = ()
    longest: float = 0.0
    gaps: int = 0
    steps: int = 0

    def with_gap(self, gap: float) -> Rhythm:
        recent = (*self.recent[-(WINDOW - 1) :], gap)
        return Rhythm(recent, max(self.longest, gap), self.gaps + 1, self.steps)

    def with_step(self) -> Rhythm:
        return Rhythm(self.recent, self.longest, self.gaps, self.steps + 1)


def learned(gaps: Iterable[float], steps: int) -> Rhythm:
    """The rhythm of a rank that showed these gaps (in order) and took `steps` steps."""
    rhythm = Rhythm(steps=steps)
    for gap in gaps:
        rhythm = rhythm.with_gap(gap)
    return rhythm


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of a non-empty sample (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def deadline(rhythm: Rhythm, warmup: float = defaults.HANG_TIMEOUT_S) -> Deadline:
    """The rule (module docstring); `warmup`: the fixed deadline before the rhythm is known."""
    longest = LONGEST_FACTOR * rhythm.longest
    if rhythm.steps < WARMUP_STEPS or rhythm.gaps < WARMUP_GAPS:
        seen = f"{rhythm.steps} step(s), {rhythm.gaps} gap(s) seen"
        if longest > warmup:
            why = f"warm-up ({seen}): {LONGEST_FACTOR:g} x the longest gap {rhythm.longest:.3g} s"
            return Deadline(seconds=longest, basis=Basis.WARMUP, why=why)
        return Deadline(seconds=warmup, basis=Basis.WARMUP, why=f"warm-up ({seen}): the default")
    median = quantile(rhythm.recent, 0.5)
    tail = quantile(rhythm.recent, TAIL_QUANTILE)
    candidates = [
        (FLOOR_S, Basis.FLOOR, f"the floor (median gap {median:.3g} s)"),
        (
            MEDIAN_FACTOR * median,
            Basis.MEDIAN,
            f"{MEDIAN_FACTOR:g} x the median gap {median:.3g} s",
        ),
        (TAIL_FACTOR * tail, Basis.TAIL, f"{TAIL_FACTOR:g} x the 90th-percentile gap {tail:.3g} s"),
        (longest, Basis.LONGEST, f"{LONGEST_FACTOR:g} x the longest gap {rhythm.longest:.3g} s"),
    ]
    seconds, basis, why = max(candidates, key=lambda c: c[0])
    return Deadline(seconds=seconds, basis=basis, why=why)


def widest(deadlines: Iterable[Deadline], otherwise: Deadline) -> Deadline:
    """The longest of the ranks' (or nodes') deadlines: the job waits for its slowest rhythm."""
    return max(deadlines, key=lambda d: d.seconds, default=otherwise)


class Learner:
    """Per rank of one node: its rhythm, from the progress the hang watch sees at each look.

    A gap is closed when a rank's latest progress moves on; its length leaves out time
    the launcher did not see pass (a suspend: no evidence of a quiet job). Gaps closed on
    leaving the rendezvous are not rhythm: init_process_group has its own allowance.
    """

    def __init__(self, warmup: float = defaults.HANG_TIMEOUT_S) -> None:
        self._warmup = warmup
        self._rhythms: dict[int, Rhythm] = {}
        self._last: dict[int, float] = {}
        self._marks: dict[int, tuple[int | None, ...]] = {}
        self._meeting: dict[int, bool] = {}

    def observe(self, progress: Iterable[RankProgress], unseen: Unseen = ALL_SEEN) -> None:
        for rank in progress:
            beat = rank.beat
            if beat is None or not rank.heartbeat:
                continue
            rhythm = self._rhythms.get(rank.rank, Rhythm())
            mark = (beat.seq, beat.step, beat.optimizer_steps)
            if rank.rank in self._marks and mark != self._marks[rank.rank]:
                rhythm = rhythm.with_step()
            self._marks[rank.rank] = mark
            last = self._last.get(rank.rank)
            if last is None or rank.last_progress > last:
                if last is not None and not self._meeting.get(rank.rank, False):
                    rhythm = rhythm.with_gap(unseen.age(last, rank.last_progress))
                self._last[rank.rank] = rank.last_progress
            self._meeting[rank.rank] = any(f == "init_process_group" for _, _, f in beat.frames)
            self._rhythms[rank.rank] = rhythm

    def rhythm(self, rank: int) -> Rhythm:
        return self._rhythms.get(rank, Rhythm())

    def deadline(self, progress: Iterable[RankProgress]) -> Deadline:
        """The job's: the widest of its live ranks' (one without a heartbeat: warm-up).

        A rank past its final record is exiting: its script's rhythm says nothing about
        how long the interpreter's teardown takes (measured: over 7 s of a torch rank on
        a loaded machine, without heartbeat or CPU), so it gets the fixed default too.
        """
        default = deadline(Rhythm(), self._warmup)
        return widest(
            (
                deadline(self.rhythm(r.rank), self._warmup)
                if r.heartbeat and not (r.beat is not None and r.beat.final)
                else default
                for r in progress
            ),
            default,
        )
