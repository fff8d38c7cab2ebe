"""Where each rank was when the job hung, and which rank is not where the others are."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from safelaunch.diagnose.frames import LIBRARY_PARTS, user_frame
from safelaunch.hangs.child_waits import waits_for
from safelaunch.hangs.detection import is_stale
from safelaunch.hangs.loops import LEFT, Frames, uneven_reason
from safelaunch.outcome import Outcome
from safelaunch.ranktext import ranks_label
from safelaunch.rundir.heartbeat_file import Beat
from safelaunch.supervisor import HangEvidence
from safelaunch.vocab import DATA, UNKNOWN, FailureClass

_DISTRIBUTED = "torch/distributed/"
_DUMP_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<func>.+)$')
_BOOTSTRAP = "safelaunch/rank/bootstrap.py"
_NOT_USERS = (*LIBRARY_PARTS, "<string>", "safelaunch/rank/")


@dataclass(frozen=True, slots=True, kw_only=True)
class Whereabouts:
    """Ranks found at the same place."""

    ranks: tuple[int, ...]
    activity: str  # the innermost function: all_reduce, load_next_batch, ...
    location: str | None  # innermost frame in the user's own code: file:line in function
    waiting: bool  # inside torch.distributed (a collective, barrier, rendezvous)
    seqs: tuple[int, ...]  # collective counts seen in the group
    frozen: str | None  # why the rank stopped reporting, when it did
    frames: Frames = ()  # its user's frames, innermost first (one member's)
    # its script ended but its process did not: why (diagnose/leaving.py still_running)
    ended: str | None = None
    # it waits on its own children: where they are (hangs/child_waits.py)
    children: str | None = None


# the Dataset protocol's methods: a rank stuck in one of them is stuck loading data
_DATASET_METHODS = frozenset({"__getitem__", "__getitems__"})


def loading_data(group: Whereabouts) -> bool:
    """The ranks wait for their DataLoader workers, or are inside a Dataset's method."""
    if group.children is not None and "DataLoader worker" in group.children:
        return True
    return any(func in _DATASET_METHODS for _, _, func in group.frames)


def place_class(elsewhere: Sequence[Whereabouts]) -> FailureClass:
    """The class of ranks found outside any collective: data/sampling where they all load
    data (the dataset's code, its workers, the files), else unknown: their own code is
    stuck, and its stack, not the network, is the lead."""
    return DATA if elsewhere and all(loading_data(g) for g in elsewhere) else UNKNOWN


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
    uneven: bool = False  # the culprits and the others ran a loop a different number of times
    deadline_why: str = ""  # --hang-timeout auto: how the deadline was learned


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


def _frozen(
    rank: int, beat: Beat | None, state: str, evidence: HangEvidence, heartbeat: bool
) -> str | None:
    if state == "T":
        return "stopped (process state T: SIGSTOP or a debugger; place from its last heartbeat)"
    if state == "D":
        return "in uninterruptible sleep (process state D: stuck in the kernel, often I/O)"
    if rank in evidence.unanswered:
        return f"{evidence.unanswered[rank]} (process state {state}){_FROM_BEAT}"
    if not heartbeat:
        return None  # a --no-python rank: only its output was watched
    if beat is None:
        return "no heartbeat at all (stuck before python started its first record)"
    if is_stale(beat, evidence.detected_at, evidence.interval, evidence.unseen):
        return _STALE  # how long, and in which process state: per group (_stale_text)
    return None


_FROM_BEAT = "; place from its last heartbeat"


# A rank whose heartbeat went stale, as ranks are grouped: without its seconds of silence
# and its process state letter, which differ between ranks frozen at the same place (two
# ranks at one line, silent 3.5 s and 3.8 s, are one group, not an "odd one out").
_STALE = "no heartbeat"


def _stale_text(silences: list[float], states: set[str]) -> str:
    low, high = min(silences), max(silences)
    span = f"{high:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}"
    return (
        f"no heartbeat for {span} s (process state {'/'.join(sorted(states))}): frozen, or "
        "native code holding the GIL"
    )


_Key = tuple[str, str | None, bool, str | None, str | None, str | None]


def _at(location: str | None, lines: Collection[str]) -> bool:
    """`path:line in func` is at one of the `path:line`s."""
    return location is not None and location.split(" in ", 1)[0] in lines


def _group(
    evidence: HangEvidence,
    lingering: Mapping[int, str] | None = None,
    blocked: Mapping[int, Collection[str]] | None = None,
) -> list[Whereabouts]:
    lingering, blocked = lingering or {}, blocked or {}
    keyed: dict[_Key, list[tuple[int, int | None]]] = {}
    stacks: dict[_Key, Frames] = {}
    silences: dict[_Key, list[float]] = {}
    states: dict[_Key, set[str]] = {}
    for progress in evidence.ranks:
        beat = progress.beat
        dumped = _read_dump(evidence.stack_files.get(progress.rank))
        frames = dumped or (beat.frames if beat else ())
        state = evidence.states.get(progress.rank, "?")
        frozen = _frozen(progress.rank, beat, state, evidence, progress.heartbeat)
        activity = (
            frames[0][2] if frames else "an unknown place (no Python stack; judged by output)"
        )
        # the bootstrap's frames (and its `python -c` string) are not the user's either
        location = user_frame(frames, also_skip=("<string>", "safelaunch/rank/"))
        # in torch.distributed, or at the line of a call its ledger says it waits in (a
        # work's wait(), an irecv's, has no Python frame of torch's)
        waiting = (bool(frames) and _DISTRIBUTED in frames[0][0]) or _at(
            location, blocked.get(progress.rank, ())
        )
        kids = evidence.children.get(progress.rank, ())
        waits = None if waiting else waits_for(frames, [(c, _read_dump(c.dump)) for c in kids])
        key = (activity, location, waiting, frozen, lingering.get(progress.rank), waits)
        keyed.setdefault(key, []).append((progress.rank, beat.seq if beat else None))
        stacks.setdefault(key, tuple(f for f in frames if not any(p in f[0] for p in _NOT_USERS)))
        if frozen == _STALE and beat is not None:
            silences.setdefault(key, []).append(silent_for(evidence, beat.time))
            states.setdefault(key, set()).add(state)
    groups = []
    for key, members in keyed.items():
        activity, location, waiting, frozen, ended, waits = key
        groups.append(
            Whereabouts(
                ranks=tuple(sorted(rank for rank, _ in members)),
                activity=activity,
                location=location,
                waiting=waiting,
                seqs=tuple(sorted({seq for _, seq in members if seq is not None})),
                frozen=_stale_text(silences[key], states[key]) if key in silences else frozen,
                frames=stacks[key],
                ended=ended,
                children=waits,
            )
        )
    return sorted(groups, key=lambda g: (-len(g.ranks), g.ranks))


SAME_PLACE = "every rank is at the same place: look for a cause outside the job"
# one node of several sees only its own ranks: the others' may be elsewhere
SAME_PLACE_HERE = (
    "every rank of this node is at the same place; the job's verdict weighs every node"
)


def where_they_were(
    evidence: HangEvidence,
    lingering: Mapping[int, str] | None = None,
    blocked: Mapping[int, Collection[str]] | None = None,
) -> tuple[Whereabouts, ...]:
    """The ranks in `evidence` grouped by where they were (most ranks first): a hang's, or
    the survivors' of a failure (hangs/survivors.py), whose evidence has the same shape.

    `lingering`: ranks whose script ended while their process did not, with why
    (diagnose/leaving.py read_lingering). `blocked`: per rank, the file:line of each
    call its ledger says it waits in."""
    return tuple(_group(evidence, lingering or {}, blocked))


def _culprits(
    groups: list[Whereabouts], exited: list[tuple[int, str]], multinode: bool = False
) -> tuple[tuple[int, ...], str]:
    """The first rule that singles out some ranks but not all of them."""
    # a rank whose script ended but whose process lives on is what the job waits for
    # (the others wait for it, or have ended): its threads say why, whoever else is there
    ended = [g for g in groups if g.ended]
    if ended:
        culprits = tuple(sorted(r for g in ended for r in g.ranks))
        if len(ended) == 1:
            return culprits, str(ended[0].ended)
        return culprits, "; ".join(f"{ranks_label(list(g.ranks))}: {g.ended}" for g in ended)
    everyone = {rank for group in groups for rank in group.ranks}
    frozen = {r for g in groups if g.frozen for r in g.ranks}
    # Heartbeats gone stale only (no T/D state, no unanswered dump) in ranks whose last
    # beat was inside a collective, and as many as the rest: those wait there (a loaded
    # machine starves beat threads); the rules below look at where the others are.
    stale_waiting = all(g.waiting and str(g.frozen).startswith(_STALE) for g in groups if g.frozen)
    if frozen and frozen != everyone and not (stale_waiting and 2 * len(frozen) >= len(everyone)):
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
    # the fewest ranks at one place, where fewer than at any other (not one of many apart)
    if len(groups) > 1 and len(groups[-1].ranks) < len(groups[-2].ranks):
        return groups[-1].ranks, "it is not where the others are"
    return (), SAME_PLACE_HERE if multinode else SAME_PLACE


def silent_for(evidence: HangEvidence, since: float) -> float:
    """Seconds from `since` to the detection, less the time the job was suspended whole
    (the launcher's view: hangs/detection.py's Unseen): not time the ranks had to run."""
    return evidence.unseen.age(since, evidence.detected_at)


def analyse_hang(
    outcome: Outcome,
    lingering: Mapping[int, str] | None = None,
    blocked: Mapping[int, Collection[str]] | None = None,
) -> HangAnalysis | None:
    """Group the ranks by where they were and name the odd ones out (`lingering`,
    `blocked`: as for where_they_were)."""
    evidence = outcome.hang
    if evidence is None:
        return None
    live = {p.rank for p in evidence.ranks}
    exited = [(r.rank, r.how_it_ended()) for r in outcome.ranks if r.rank not in live]
    groups = _group(evidence, lingering or {}, blocked)
    culprits, reason = _culprits(groups, exited, outcome.multinode)
    if not culprits and not exited:  # two places alike in size: one left the loop?
        culprits = next((g.ranks for g in groups if uneven_reason(groups, g.ranks) == LEFT), ())
    uneven = None if exited else uneven_reason(groups, culprits)
    stuck = min(silent_for(evidence, p.last_progress) for p in evidence.ranks)
    stacks = next(iter(evidence.stack_files.values()), None)
    return HangAnalysis(
        stuck_for=stuck,
        timeout=evidence.timeout,
        groups=tuple(groups),
        exited=tuple(exited),
        culprits=culprits,
        reason=uneven or reason,
        stacks_dir=stacks.parent if stacks else None,
        uneven=uneven is not None,
        deadline_why=evidence.why if evidence.auto else "",
    )
