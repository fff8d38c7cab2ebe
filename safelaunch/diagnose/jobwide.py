"""The job's verdict from every node's evidence, the same on every node.

Each node judges its own ranks and ships, with its end-of-attempt summary, compact
evidence of each (where its main thread was, whether inside torch.distributed, its
collective count, how it ended) and its arbiter's items. Every node then weighs the
union: the nodes' own items plus what only the whole job shows (the ranks that are not
in the collective every other rank of the job waits in; the ranks behind the others'
count). So a rank stuck on one node of sixteen is named, with its node, host and
file:line, in the same words on all sixteen.

Bounded: at most RANK_BYTES of text per rank and ITEMS items per node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safelaunch.diagnose.arbiter import Item, Source, Tier, Verdict
from safelaunch.diagnose.frames import user_frame
from safelaunch.diagnose.witnesses import one
from safelaunch.ranktext import ranks_label
from safelaunch.rundir import heartbeat_file
from safelaunch.vocab import FailureClass, Word, word_of

TEXT = 160  # characters of each shipped text: a rank's evidence stays under ~RANK_BYTES
RANK_BYTES = 600
ITEMS = 16
_DISTRIBUTED = "torch/distributed/"
_NOT_USERS = ("<string>", "safelaunch/rank/")


@dataclass(frozen=True, slots=True, kw_only=True)
class RankPlace:
    """Where one rank was at the end, as far as its node saw."""

    rank: int
    activity: str | None  # innermost function (all_reduce, load_next_batch)
    location: str | None  # innermost user frame: path:line in func
    waiting: bool  # inside torch.distributed
    seq: int | None  # collectives issued (default group)
    ended: str | None  # how it ended, when it did on its own ("exited with code 1")


def places(
    heartbeat_dir: Path | None,
    ranks: Iterable[int],
    ended: Mapping[int, str],
    fresher: Mapping[int, RankPlace] | None = None,
) -> tuple[RankPlace, ...]:
    """Every rank's place: from `fresher` (a hang's stacks), else its last heartbeat record.

    `ended`: how the ranks that ended on their own ended."""
    found = []
    for rank in ranks:
        if fresher and rank in fresher:
            found.append(fresher[rank])
            continue
        beat = (
            heartbeat_file.read(rank, heartbeat_file.path(heartbeat_dir, rank))
            if heartbeat_dir is not None
            else None
        )
        frames = beat.frames if beat is not None else ()
        found.append(
            RankPlace(
                rank=rank,
                activity=frames[0][2] if frames else None,
                location=user_frame(frames, also_skip=_NOT_USERS),
                waiting=bool(frames) and _DISTRIBUTED in frames[0][0],
                seq=beat.seq if beat is not None and isinstance(beat.seq, int) else None,
                ended=ended.get(rank),
            )
        )
    return tuple(found)


def _cut(text: str | None) -> str | None:
    return None if text is None else text[:TEXT]


def pack(ranks: Sequence[RankPlace], verdict: Verdict | None) -> dict[str, Any]:
    """What this node ships (JSON), bounded."""
    items = [] if verdict is None else [verdict.decided_by, *verdict.agreeing, *verdict.disagreeing]
    return {
        "ranks": [
            {
                "rank": p.rank,
                "activity": _cut(p.activity),
                "location": _cut(p.location),
                "waiting": p.waiting,
                "seq": p.seq,
                "ended": _cut(p.ended),
            }
            for p in ranks
        ],
        "items": [
            {
                "source": i.source,
                "tier": i.tier,
                "ranks": list(i.ranks)[:64],
                "says": _cut(i.says),
                "location": _cut(i.location),
                "class": i.klass,
                "ambiguous": i.ambiguous,
            }
            for i in items[:ITEMS]
            if i is not None
        ],
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeEvidence:
    node: int
    host: str
    ranks: tuple[RankPlace, ...]
    items: tuple[Item, ...]


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value[:TEXT] if isinstance(value, str) else None


def _word(value: object, words: type[Word]) -> Word | None:
    return word_of(value, words) if isinstance(value, str) else None


def unpack(node: int, host: str, data: object) -> NodeEvidence | None:
    """A node's shipped evidence; None when it has none or it is malformed (another
    version's launcher: its summary is still read, its evidence left out)."""
    if not isinstance(data, dict):
        return None
    try:
        ranks = tuple(
            RankPlace(
                rank=int(r["rank"]),
                activity=_str(r.get("activity")),
                location=_str(r.get("location")),
                waiting=bool(r.get("waiting")),
                seq=_int(r.get("seq")),
                ended=_str(r.get("ended")),
            )
            for r in data["ranks"]
        )
        items = []
        for i in data["items"][:ITEMS]:
            source = _word(i.get("source"), Source)
            tier = _word(i.get("tier"), Tier)
            if source is None or tier is None:
                continue
            items.append(
                Item(
                    source=source,
                    tier=tier,
                    ranks=tuple(int(r) for r in i["ranks"]),
                    says=_str(i.get("says")) or "",
                    location=_str(i.get("location")),
                    klass=_word(i.get("class"), FailureClass),
                    ambiguous=i.get("ambiguous") is True,
                )
            )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return NodeEvidence(node=node, host=host, ranks=ranks, items=tuple(items))


def _live(nodes: Sequence[NodeEvidence]) -> list[RankPlace]:
    return [p for n in nodes for p in n.ranks if p.ended is None]


def job_items(nodes: Sequence[NodeEvidence]) -> list[Item]:
    """The nodes' own items, and what only the whole job's ranks together show."""
    items = [i for n in nodes for i in n.items]
    live = _live(nodes)
    waiting = [p for p in live if p.waiting]
    elsewhere = [p for p in live if not p.waiting and p.activity is not None]
    if waiting and elsewhere and len(elsewhere) < len(waiting):
        ranks = tuple(sorted(p.rank for p in elsewhere))
        items.append(
            Item(
                source=Source.STACKS,
                tier=Tier.BEHIND,
                ranks=ranks,
                says=f"{ranks_label(ranks)} of the job's {len(live)} running ranks is not in "
                "a collective; the others wait in one",
                location=one(p.location for p in elsewhere),
            )
        )
        return items
    seqs = Counter(p.seq for p in waiting if p.seq is not None)
    if len(seqs) > 1:
        low, high = min(seqs), max(seqs)
        behind = tuple(sorted(p.rank for p in waiting if p.seq == low))
        if len(behind) < len(waiting) / 2:
            items.append(
                Item(
                    source=Source.STACKS,
                    tier=Tier.BEHIND,
                    ranks=behind,
                    says=f"{ranks_label(behind)} is behind: collective #{low} vs #{high}",
                    location=one(p.location for p in waiting if p.seq == low),
                )
            )
    return items


def place_lines(nodes: Sequence[NodeEvidence]) -> list[str]:
    """One line per place where the job's running ranks were: "14 ranks wait in
    all_reduce #4 at train.py:13", the most crowded first."""
    at: dict[tuple[bool, str, str | None, int | None], list[int]] = {}
    for p in _live(nodes):
        key = (p.waiting, p.activity or "an unknown place", p.location, p.seq)
        at.setdefault(key, []).append(p.rank)
    lines = []
    for (waiting, activity, location, seq), ranks in sorted(at.items(), key=lambda kv: -len(kv[1])):
        many = len(ranks) > 1
        count = f" ({len(ranks)})" if many else ""
        verb = ("wait in" if many else "waits in") if waiting else ("are in" if many else "is in")
        where = f" at {location}" if location else ""
        if seq is None:
            number = after = ""
        elif waiting:  # the collective it waits in
            number, after = f" #{seq}", ""
        else:  # the last one it took part in
            number, after = "", f", after collective #{seq}"
        lines.append(f"{ranks_label(sorted(ranks))}{count} {verb} {activity}{number}{where}{after}")
    return lines


def placed(nodes: Sequence[NodeEvidence]) -> dict[int, str]:
    """ "node N, host H" for every rank a node shipped."""
    return {p.rank: f"node {n.node}, host {n.host}" for n in nodes for p in n.ranks}
