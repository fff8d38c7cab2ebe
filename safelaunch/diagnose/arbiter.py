"""One culprit from all the evidence: the arbiter every view asks.

Each evidence source (flight records, the call ledger, the wait-for graph, error texts,
the stacks, exit records, the first failure in time) becomes an `Item`: the ranks it
blames, in its own words, with how much it can be trusted (its `Tier`). `decide` keeps
the strongest tier that blames anyone; where that tier's items share a rank, those ranks
are the culprits, else the evidence disagrees and no culprit is named (a wrong headline
is worse than none). Items of weaker tiers that blame other ranks are kept as
`disagreeing`, shown as such, never as a second verdict. An `ambiguous` item says "one
of these ranks, nothing says which" (two ranks that called different sizes at the same
call): it names nobody, but where it is the strongest evidence it keeps the weaker tiers
(the first to fail in time) from naming one of them, and so does it for an item of its
own tier from a source that knows less (Source's order) that only picks one of them.

The tiers, strongest first, and why:
- CONTENT: what a rank did differs from what the others did at the same call (another
  op, size or dtype; a wait-for cycle; torch naming an inconsistent rank). It does not
  depend on when anyone was looked at.
- OWN_ERROR: a rank's own error that is no consequence of a peer's, or a rank that left
  the collectives while its peers still communicated (its exit record).
- BEHIND: a rank the others wait for (it never called the collective they wait in; it is
  not where they are): right unless a healthy straggler was caught late, hence below an
  error of one's own.
- FIRST_FAILURE: the first rank to fail in time, where its error only says it waited
  (a timeout, a mismatch it detected) or is a consequence: the last resort.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from safelaunch.ranktext import ranks_label
from safelaunch.vocab import FailureClass, StrEnum


class Source(StrEnum):
    """Where an item of evidence comes from (report.json's `decided_by.source`)."""

    FLIGHT_RECORD = "flight-record"
    CALL_LEDGER = "call-ledger"
    WAIT_FOR = "wait-for"
    ERROR_TEXT = "error-text"
    STACKS = "stacks"
    EXIT_RECORD = "exit-record"
    FIRST_FAILURE = "first-failure"


class Tier(StrEnum):
    """How far an item can be trusted, strongest first (TIERS)."""

    CONTENT = "content"
    OWN_ERROR = "own error"
    BEHIND = "behind"
    FIRST_FAILURE = "first failure"


TIERS: tuple[Tier, ...] = tuple(Tier)


@dataclass(frozen=True, slots=True, kw_only=True)
class Item:
    """One piece of evidence that blames some ranks."""

    source: Source
    tier: Tier
    ranks: tuple[int, ...]  # global ranks it blames
    says: str  # its own words: "rank 2 called all_reduce(float32[9]) instead"
    location: str | None = None  # where the blamed rank was: path:line in func
    klass: FailureClass | None = None  # the class this evidence points to, when it does
    ambiguous: bool = False  # one of `ranks`, nobody knows which (module docstring)


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """Who broke the job, and on what evidence."""

    culprits: tuple[int, ...]  # empty: no culprit the evidence supports
    decided_by: Item | None
    agreeing: tuple[Item, ...]  # other items that blame a culprit
    disagreeing: tuple[Item, ...]  # items that blame only other ranks

    @property
    def confident(self) -> bool:
        return bool(self.culprits)

    def location(self) -> str | None:
        """Where the culprit was: the deciding item's place, else an agreeing item's."""
        for item in (self.decided_by, *self.agreeing):
            if item is not None and item.location:
                return item.location
        return None

    def klass(self) -> FailureClass | None:
        for item in (self.decided_by, *self.agreeing):
            if item is not None and item.klass is not None:
                return item.klass
        return None


NO_VERDICT = Verdict(culprits=(), decided_by=None, agreeing=(), disagreeing=())


def _order(item: Item) -> tuple[int, int]:
    return TIERS.index(item.tier), tuple(Source).index(item.source)


def decide(items: Sequence[Item]) -> Verdict:
    """The culprits the strongest evidence supports (module docstring)."""
    blaming = sorted((i for i in items if i.ranks), key=_order)
    if not blaming:
        return NO_VERDICT
    tier = blaming[0].tier
    level = [i for i in blaming if i.tier == tier]
    top = [i for i in level if not i.ambiguous and not _picks_one(i, level)]
    if not top:  # only "one of these": no culprit, and no weaker tier picks one of them
        return Verdict(culprits=(), decided_by=None, agreeing=(), disagreeing=tuple(blaming))
    shared = set(top[0].ranks).intersection(*(i.ranks for i in top[1:]))
    if not shared:
        return Verdict(culprits=(), decided_by=None, agreeing=(), disagreeing=tuple(top))
    blaming = [i for i in blaming if not i.ambiguous]
    culprits = tuple(sorted(shared))
    # the item that names the culprits most narrowly says why (its words name no other rank)
    decided = min(top, key=lambda i: (len(i.ranks), _order(i)))
    agreeing = tuple(i for i in blaming if i is not decided and set(i.ranks) & shared)
    disagreeing = tuple(i for i in blaming if not set(i.ranks) & shared)
    return Verdict(
        culprits=culprits, decided_by=decided, agreeing=agreeing, disagreeing=disagreeing
    )


def _picks_one(item: Item, level: Sequence[Item]) -> bool:
    """The item only picks one of an ambiguous item's ranks, from a source that knows less
    (a hang's stack snapshot against the call ledgers that found them tied)."""
    sources = tuple(Source)
    return any(
        a.ambiguous
        and set(item.ranks) <= set(a.ranks)
        and sources.index(item.source) > sources.index(a.source)
        for a in level
    )


def headline(verdict: Verdict, places: dict[int, str] | None = None) -> str | None:
    """`culprit: rank 2 (node 1, host h2) at train.py:9 in step [communication]: <why>`;
    the disagreement in one line when the evidence names no culprit; None without evidence.

    `places`: "node N, host H" per rank in a multi-node job.
    """
    if verdict.decided_by is None:
        if not verdict.disagreeing:
            return None
        if verdict.disagreeing[0].ambiguous:  # the strongest evidence cannot say which
            return f"no culprit: {verdict.disagreeing[0].says} ({verdict.disagreeing[0].source})"
        views = "; ".join(f"{i.source}: {ranks_label(i.ranks)}" for i in verdict.disagreeing)
        return f"no culprit: the evidence disagrees ({views})"
    who = ranks_label(verdict.culprits)
    if places and len(verdict.culprits) == 1 and verdict.culprits[0] in places:
        who += f" ({places[verdict.culprits[0]]})"
    where = verdict.location()
    klass = verdict.klass()
    line = f"culprit: {who}" + (f" at {where}" if where else "") + (f" [{klass}]" if klass else "")
    return f"{line}: {verdict.decided_by.says} ({verdict.decided_by.source})"


def disagreement_lines(verdict: Verdict) -> list[str]:
    """The evidence that blames other ranks, said as such (under the headline)."""
    if verdict.decided_by is None:
        return [f"  {i.source} says: {i.says}" for i in verdict.disagreeing]
    # of the last resort's kind, only the first failure in time is said (the rank the
    # headline would have named without the arbiter); report.json keeps them all
    shown = [
        i
        for i in verdict.disagreeing
        if i.tier != Tier.FIRST_FAILURE or i.source == Source.FIRST_FAILURE
    ]
    return [
        f"  {i.source} blames {ranks_label(i.ranks)} instead: {i.says} (weaker: {i.tier})"
        for i in shown
    ]


def verdict_lines(
    verdict: Verdict | None, stacks_only: bool = False, anchored: bool = False
) -> list[str]:
    """The summary's lines on the culprit and what disagrees; nothing where they add nothing.

    `stacks_only`: a hang, whose "likely culprit" line already says what the stacks say;
    else a failure, whose block already says what the first failure's error says.
    `anchored`: the block above names the arbiter's culprit with its evidence.
    """
    if verdict is None:
        return []
    decided = verdict.decided_by
    said = {Source.STACKS} if stacks_only else {Source.FIRST_FAILURE}
    if decided is not None and anchored:
        return [f"  decided by: {decided.source} ({decided.tier})", *disagreement_lines(verdict)]
    if decided is not None and decided.source in said:
        return disagreement_lines(verdict)
    line = headline(verdict)
    return [f"  {line}", *disagreement_lines(verdict)] if line else []


def _item_record(item: Item) -> dict[str, object]:
    said: dict[str, object] = {"source": item.source, "ranks": list(item.ranks), "says": item.says}
    return {**said, "ambiguous": True} if item.ambiguous else said


def record(
    verdict: Verdict | None,
    places: dict[int, tuple[int | None, str | None]] | None = None,
    klass: FailureClass | None = None,
) -> dict[str, object]:
    """report.json's `diagnosis.verdict`, `culprits` and `disagreeing` (docs/report-json.md).

    `places`: (node, host) per rank, where known. `klass`: the diagnosis's class, for a
    culprit whose evidence points to none of its own.
    """
    verdict = verdict or NO_VERDICT
    decided = verdict.decided_by
    culprits = [
        {
            "rank": rank,
            "node": (places or {}).get(rank, (None, None))[0],
            "host": (places or {}).get(rank, (None, None))[1],
            "location": verdict.location(),
            "class": verdict.klass() or klass,
            "decided_by": {"source": decided.source, "says": decided.says} if decided else None,
        }
        for rank in verdict.culprits
    ]
    return {
        "verdict": headline(verdict),
        "culprits": culprits,
        "disagreeing": [_item_record(i) for i in verdict.disagreeing],
    }
