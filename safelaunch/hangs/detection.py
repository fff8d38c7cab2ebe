"""Hang detection: pure rules over heartbeat records, plus reading them.

The job is hung when no live rank has made progress for --hang-timeout seconds.
Progress is any change of a rank's main-thread stack, explicit step or collective
count (its record's `since`), any output it writes, and work the kernel saw its
process tree do (CPU time, I/O, disk waits of the rank and its descendants). A frozen rank (SIGSTOP,
native code holding the GIL) stops updating its record, so its `since` stops too.

Job-wide on purpose: a rank waiting in a barrier while rank 0 writes a checkpoint
is not hung, and no false alarm may kill a healthy job. A rank looping forever in
Python while the others wait is therefore not caught (documented).

Time the launcher did not see pass (it was stopped with the whole job, or the machine
slept: `Unseen`) is no evidence that the ranks made no progress: it is left out of
every age these rules compare.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from safelaunch.plan import Timebox
from safelaunch.rundir.heartbeat_file import Beat

# A rank that has not written its first record yet (python still starting) is
# given this long before it can count as stuck.
STARTUP_ALLOWANCE = 60.0
# A rank inside init_process_group gets at least this long: a store client that
# found no server yet retries after a backoff of seconds, while the server rank
# waits for it, so for a while every rank looks idle (measured: > 2 s here).
RENDEZVOUS_ALLOWANCE = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RankProgress:
    """When a live rank was last seen to make progress, from every source."""

    rank: int
    last_progress: float
    beat: Beat | None
    heartbeat: bool = True  # a Python rank with a heartbeat; else judged by its output


@dataclass(frozen=True, slots=True)
class Unseen:
    """Stretches of wall time (start, end) the launcher did not see pass.

    The launcher was stopped together with its ranks (SIGSTOP, SLURM's `scontrol
    suspend`, a laptop's sleep): the ranks' records and output stand still for that time
    without any hang, so an age measured across it would kill a healthy job on resume.
    """

    spans: tuple[tuple[float, float], ...] = ()

    def age(self, since: float, now: float) -> float:
        """now - since, less the unseen time in between."""
        hidden = sum(max(0.0, min(end, now) - max(start, since)) for start, end in self.spans)
        return now - since - hidden

    def after(self, earliest: float) -> Unseen:
        """Only the spans that end after `earliest`: the others shorten no age from then on."""
        return Unseen(tuple(s for s in self.spans if s[1] > earliest))


ALL_SEEN = Unseen()


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildProcess:
    """A live descendant of a rank when its stacks were taken (hangs/child_stacks.py)."""

    pid: int
    command: str
    dump: Path | None  # its own faulthandler dump (a process forked from the rank)


@dataclass(frozen=True, slots=True, kw_only=True)
class HangEvidence:
    """What the launcher saw when it declared the hang."""

    detected_at: float  # wall clock
    timeout: float
    interval: float  # how often ranks were asked to write their record
    ranks: tuple[RankProgress, ...]
    states: Mapping[int, str]  # /proc state letter per rank: S, R, T (stopped), D, ...
    stack_files: Mapping[int, Path]
    # the job was suspended whole before the hang showed: ages leave that time out, so
    # "no progress for X s" is the time the ranks had to make progress, not the suspend's
    unseen: Unseen = ALL_SEEN
    # ranks whose stacks could not be taken after a failure, and why (a hang's silent
    # ranks show by their stale heartbeat)
    unanswered: Mapping[int, str] = field(default_factory=dict)
    children: Mapping[int, tuple[ChildProcess, ...]] = field(default_factory=dict)  # by rank
    # why `timeout` was the deadline: "3 x the median gap 0.3 s" (auto), "as given" (fixed)
    basis: str = "fixed"
    why: str = ""
    auto: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Survivors:
    """A failure's survivors, taken before the teardown (hangs/survivors.py): a hang's
    evidence shape, read by the same grouping (hangs/analysis.py `where_they_were`)."""

    after: str  # what made safelaunch stop them: "rank 2 failed", "node 1 stopped: ..."
    failed_rank: int | None  # the rank whose failure it was (None: another node's stop)
    evidence: HangEvidence  # live ranks, states, stack files, who did not answer
    took: float  # seconds the snapshot took


def last_progress(
    beat: Beat | None,
    last_output: float | None,
    spawned_at: float,
    bootstrapped: bool,
    last_work: float | None = None,
) -> float:
    """The latest sign of life: a changed record, a byte of output, work seen in the rank's
    process tree (CPU, I/O, disk waits: hangs/activity.py), or the spawn (+ allowance)."""
    start = spawned_at + (STARTUP_ALLOWANCE if bootstrapped and beat is None else 0.0)
    signs = [start]
    if beat is not None:
        signs.append(beat.since)
    if last_output is not None:
        signs.append(last_output)
    if last_work is not None:
        signs.append(last_work)
    return max(signs)


def stale_after(interval: float) -> float:
    """How late a record may be before the rank counts as no longer writing it."""
    return 3 * interval + 0.5


def is_stale(beat: Beat, now: float, interval: float, unseen: Unseen = ALL_SEEN) -> bool:
    """The rank stopped writing its record: frozen, stopped, or native code holding the GIL."""
    return unseen.age(beat.time, now) > stale_after(interval)


def patience(
    progress: RankProgress, now: float, timeout: float, interval: float, unseen: Unseen = ALL_SEEN
) -> float:
    """How long this rank may show no progress: longer while it reports from the rendezvous.

    Not for a rank whose record went stale there: it froze, and waiting helps nobody.
    """
    beat = progress.beat
    if beat is None or is_stale(beat, now, interval, unseen):
        return timeout
    if any(function == "init_process_group" for _, _, function in beat.frames):
        return max(timeout, RENDEZVOUS_ALLOWANCE)
    return timeout


def is_hung(
    progress: Iterable[RankProgress],
    now: float,
    timeout: float,
    interval: float,
    unseen: Unseen = ALL_SEEN,
) -> bool:
    """True when every live rank has been without progress for longer than its patience
    (time the launcher did not see pass left out)."""
    ranks = list(progress)
    return bool(ranks) and all(
        unseen.age(r.last_progress, now) > patience(r, now, timeout, interval, unseen)
        for r in ranks
    )


def passed_point(box: Timebox, beats: Sequence[Beat | None], elapsed: float) -> str | None:
    """Why a rerun has clearly passed the point where the job failed; None while it has not.

    Every live rank must be past it by more than one step or collective: the point
    itself may be where the job failed.
    """
    if box.past_step is not None or box.past_seq is not None:
        if not beats or any(b is None for b in beats):
            return None
        known = [b for b in beats if b is not None]
        if box.past_step is not None:
            if all(b.step is not None and b.step > box.past_step + 1 for b in known):
                return f"every rank is past step {box.past_step}, where the job had got to"
            return None
        if all(b.seq is not None and b.seq > (box.past_seq or 0) + 1 for b in known):
            return f"every rank is past collective #{box.past_seq}, where the job had got to"
        return None
    if box.after_s is not None and elapsed >= box.after_s:
        return f"it ran {elapsed:.0f} s without failing, past the job's time to failure"
    return None
