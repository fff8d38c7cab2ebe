"""Where each rank was when the job hung, and which rank is not where the others are."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from safelaunch.diagnose.frames import user_frame
from safelaunch.outcome import Outcome
from safelaunch.supervisor import Beat, HangEvidence
from safelaunch.supervisor.hang import is_stale

_DISTRIBUTED = "torch/distributed/"
_DUMP_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<func>.+)$')
_BOOTSTRAP = "safelaunch/rank/bootstrap.py"

Frames = tuple[tuple[str, int, str], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Whereabouts:
    """Ranks found at the same place."""

    ranks: tuple[int, ...]
    activity: str  # the innermost function: all_reduce, load_next_batch, ...
    location: str | None  # innermost frame in the user's own code: file:line in function
    waiting: bool  # inside torch.distributed (a collective, barrier, rendezvous)
    seqs: tuple[int, ...]  # collective counts seen in the group
    frozen: str | None  # why the rank stopped reporting, when it did


@dataclass(frozen=True, slots=True, kw_only=True)
class HangAnalysis:
    """The hang, explained: groups of ranks, the odd ones out and why they are suspects."""

    stuck_for: float
    timeout: float
    groups: tuple[Whereabouts, ...]
    exited: tuple[tuple[int, str], ...]  # ranks already gone: (rank, how they ended)
    culprits: tuple[int, ...]
    reason: str
    stacks_dir: Path | None


def main_thread_frames(dump: str) -> Frames:
    """The main thread's frames (innermost first) from a faulthandler all-threads dump.

    The main thread is the one that runs the bootstrap; the dump is taken when
    the hang is declared, so it is fresher than a heartbeat record, and it is the
    only view of a rank whose heartbeat thread could not run.
    """
    for block in dump.split("\n\n"):
        frames = [
            (m["path"], int(m["line"]), m["func"].strip())
            for m in map(_DUMP_FRAME.match, block.splitlines())
            if m
        ]
        if any(_BOOTSTRAP in path for path, _, _ in frames):
            return tuple(frames)
    return ()


def _read_dump(path: Path | None) -> Frames:
    if path is None:
        return ()
    try:
        return main_thread_frames(path.read_text(errors="replace"))
    except OSError:
        return ()


def _frozen(beat: Beat | None, state: str, evidence: HangEvidence, heartbeat: bool) -> str | None:
    if state == "T":
        return "stopped (process state T: SIGSTOP or a debugger; place from its last heartbeat)"
    if state == "D":
        return "in uninterruptible sleep (process state D: stuck in the kernel, often I/O)"
    if not heartbeat:
        return None  # a --no-python rank: only its output was watched
    if beat is None:
        return "no heartbeat at all (stuck before python started its first record)"
    if is_stale(beat, evidence.detected_at, evidence.interval):
        silent = evidence.detected_at - beat.time
        return (
            f"no heartbeat for {silent:.1f} s (process state {state}): frozen, or native "
            "code holding the GIL"
        )
    return None


def _group(evidence: HangEvidence) -> list[Whereabouts]:
    keyed: dict[tuple[str, str | None, bool, str | None], list[tuple[int, int | None]]] = {}
    for progress in evidence.ranks:
        beat = progress.beat
        dumped = _read_dump(evidence.stack_files.get(progress.rank))
        frames = dumped or (beat.frames if beat else ())
        state = evidence.states.get(progress.rank, "?")
        frozen = _frozen(beat, state, evidence, progress.heartbeat)
        activity = (
            frames[0][2] if frames else "an unknown place (no Python stack; judged by output)"
        )
        waiting = bool(frames) and _DISTRIBUTED in frames[0][0]
        # the bootstrap's frames (and its `python -c` string) are not the user's either
        location = user_frame(frames, also_skip=("<string>", "safelaunch/rank/"))
        key = (activity, location, waiting, frozen)
        keyed.setdefault(key, []).append((progress.rank, beat.seq if beat else None))
    groups = [
        Whereabouts(
            ranks=tuple(sorted(rank for rank, _ in members)),
            activity=activity,
            location=location,
            waiting=waiting,
            seqs=tuple(sorted({seq for _, seq in members if seq is not None})),
            frozen=frozen,
        )
        for (activity, location, waiting, frozen), members in keyed.items()
    ]
    return sorted(groups, key=lambda g: (-len(g.ranks), g.ranks))


def _culprits(
    groups: list[Whereabouts], exited: list[tuple[int, str]]
) -> tuple[tuple[int, ...], str]:
    """The first rule that singles out some ranks but not all of them."""
    everyone = {rank for group in groups for rank in group.ranks}
    frozen = {r for g in groups if g.frozen for r in g.ranks}
    if frozen and frozen != everyone:
        return tuple(sorted(frozen)), "it stopped responding while the others wait for it"
    if exited:
        gone = ", ".join(f"rank {rank} {how}" for rank, how in exited)
        return tuple(r for r, _ in exited), f"{gone} while the others still wait for it"
    seqs = {g.seqs[0] for g in groups if len(g.seqs) == 1}
    if len(seqs) > 1:
        low = min(seqs)
        behind = {r for g in groups if g.seqs and max(g.seqs) == low for r in g.ranks}
        return tuple(sorted(behind)), f"it is behind: collective #{low} vs #{max(seqs)}"
    waiting = {r for g in groups if g.waiting for r in g.ranks}
    if waiting and waiting != everyone:
        elsewhere = tuple(sorted(everyone - waiting))
        return elsewhere, "the others wait in a collective; it is not in one"
    if len(groups) > 1:
        return groups[-1].ranks, "it is not where the others are"
    return (), "every rank is at the same place: look for a cause outside the job"


def analyse_hang(outcome: Outcome) -> HangAnalysis | None:
    """Group the ranks by where they were and name the odd ones out."""
    evidence = outcome.hang
    if evidence is None:
        return None
    live = {p.rank for p in evidence.ranks}
    exited = [(r.rank, r.how_it_ended()) for r in outcome.ranks if r.rank not in live]
    groups = _group(evidence)
    culprits, reason = _culprits(groups, exited)
    stuck = min(evidence.detected_at - p.last_progress for p in evidence.ranks)
    stacks = next(iter(evidence.stack_files.values()), None)
    return HangAnalysis(
        stuck_for=stuck,
        timeout=evidence.timeout,
        groups=tuple(groups),
        exited=tuple(exited),
        culprits=culprits,
        reason=reason,
        stacks_dir=stacks.parent if stacks else None,
    )
