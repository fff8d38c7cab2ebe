"""Diagnose: which rank really failed first, what kind of failure it is, what to do.

Reads logs only. The error text comes from the error file (torch elastic's
`@record`) when there is one, else from the last traceback in the rank's log; the
class, meaning and next steps from the knowledge base (signatures/). A rank whose
log shows only the consequences of a peer's death is never the root cause.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from safelaunch.diagnose import stragglers as arrival
from safelaunch.diagnose.match import non_finite_loss
from safelaunch.diagnose.reading import LOG_TAIL
from safelaunch.diagnose.reading import read_tail as read_tail  # re-exported
from safelaunch.diagnose.signatures import SIGNATURES, Signature
from safelaunch.diagnose.stragglers import Arrivals
from safelaunch.outcome import AttemptStatus, Outcome, RankEnding, RankResult
from safelaunch.vocab import COMMUNICATION, FailureClass

# What only a failed or hung attempt needs (the root-cause rule, error texts, hang and
# flight-record analysis, how ranks left) is imported where it is used: a launch imports
# this package while its ranks run, and those modules were ~13 ms of the launcher's CPU
# that a job which succeeds never uses (bench/vs_torchrun.py; tests/test_import_cost.py).
if TYPE_CHECKING:
    from safelaunch.diagnose.arbiter import Item, Verdict
    from safelaunch.diagnose.errortext import ErrorText
    from safelaunch.diagnose.jobwide import RankPlace
    from safelaunch.diagnose.leaving import Leave
    from safelaunch.diagnose.rootcause import RankEvidence, RootCause
    from safelaunch.flights.forensics import Forensics
    from safelaunch.hangs.analysis import HangAnalysis, Whereabouts
    from safelaunch.rundir.calls_file import CallLedger

__all__ = [
    "LOG_TAIL",
    "Diagnosis",
    "describe_ending",
    "diagnose",
    "read_tail",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    """What went wrong, as far as this stage can tell."""

    root_cause: RankResult | None
    error: ErrorText | None
    hang: HangAnalysis | None = None
    klass: FailureClass | None = None  # one of the five classes, or unknown; None on success
    signature: Signature | None = None
    evidence: str | None = None  # the log line that matched the signature
    consequences: tuple[tuple[int, str], ...] = ()  # (rank, signature id): failed because of it
    non_finite: tuple[tuple[int, str], ...] = ()  # (rank, line): NaN/inf losses in the logs
    crashed_at_exit: bool = False  # a Python error came first, then the shutdown crash
    collectives: Forensics | None = None  # where the ranks' flight records diverge
    stragglers: Arrivals | None = None  # arrival order at the collectives; the straggler
    left_early: bool = False  # the root cause ended while its peers still communicated
    leaves: Mapping[int, Leave] = field(default_factory=dict)  # ranks that ended without error
    seqs: Mapping[int, int] = field(default_factory=dict)  # last collective count per rank
    last_lines: tuple[str, ...] = ()  # the root cause's log ends, when it has no error line
    seen: str | None = None  # class unknown: what the traceback's layers showed
    verdict: Verdict | None = None  # the arbiter's culprits from all the evidence
    places: tuple[RankPlace, ...] = ()  # where each rank was: what a node ships (jobwide.py)
    nccl: bool = True  # the ranks asked for or used NCCL, or wrote no backend record
    # a failure: where the ranks still alive were, taken before the teardown (outcome.survivors)
    survivors: tuple[Whereabouts, ...] = ()


def hang_class(hang: HangAnalysis) -> FailureClass:
    """Data/sampling when the culprits ran a loop a different number of times than the
    others (uneven data: hang.py); communication when they wait in a collective (or every
    rank does alike); unknown when a culprit is stuck in its own code: its stack, not the
    network, is the lead."""
    if hang.uneven:
        from safelaunch.hangs.loops import UNEVEN_ITERATIONS

        return UNEVEN_ITERATIONS.klass
    from safelaunch.hangs.analysis import place_class

    outside = [g for g in hang.groups if set(g.ranks) & set(hang.culprits) and not g.waiting]
    return place_class(outside) if outside else COMMUNICATION


def evidence_of(
    result: RankResult,
    text: str,
    leave: Leave | None,
    beats: Mapping[int, int | None] | None = None,
) -> RankEvidence:
    """A judged rank as the root-cause rule sees it (`beats`: collectives issued by each
    rank's last heartbeat record, for the ranks that have one)."""
    from safelaunch.diagnose.rootcause import RankEvidence

    return RankEvidence(
        rank=result.rank,
        text=text,
        failed=result.state == RankEnding.FAILED,
        ended=result.ended_after
        if result.state in (RankEnding.FAILED, RankEnding.SUCCEEDED)
        else None,
        code=result.exit_code
        if result.state in (RankEnding.FAILED, RankEnding.SUCCEEDED)
        else None,
        signum=result.signal,
        error_file=result.error_file,
        leave=leave,
        seq=beats.get(result.rank) if beats else None,
        beat=beats is not None and result.rank in beats,
    )


def diagnose(
    outcome: Outcome, table: Sequence[Signature] = SIGNATURES, heartbeat_dir: Path | None = None
) -> Diagnosis:
    """Root cause, class, signature and next steps; NaN/inf losses in any rank's log.

    `heartbeat_dir`: where the ranks wrote their heartbeat and exit records (how far
    each got, where a rank left); without it those details are left out.
    """
    texts = {r.rank: read_tail(r.log_path) for r in outcome.ranks}
    non_finite = tuple(
        (rank, line) for rank, text in texts.items() if (line := non_finite_loss(text))
    )
    stragglers = arrival.for_attempt(outcome.attempt_dir)
    failed = [r for r in outcome.ranks if r.state == RankEnding.FAILED]
    no_cause = outcome.first_failure is None or not failed
    if (
        outcome.hang is None
        and outcome.status not in (AttemptStatus.FAILED, AttemptStatus.HUNG)
        and no_cause
    ):
        # what the rest would find for a job that ended well, without importing it
        return Diagnosis(root_cause=None, error=None, non_finite=non_finite, stragglers=stragglers)
    from safelaunch.diagnose.errortext import last_lines
    from safelaunch.diagnose.leaving import (
        leaves_of,
        lingering_of,
        read_counts,
        read_exits,
        read_seqs,
        thread_places,
    )
    from safelaunch.diagnose.rootcause import find_root_cause, follow_verdict
    from safelaunch.flights.forensics import for_attempt
    from safelaunch.hangs.analysis import analyse_hang, where_they_were
    from safelaunch.hangs.loops import UNEVEN_ITERATIONS

    exits = read_exits(heartbeat_dir)  # the ranks' exit records, read once
    lingering, threads = lingering_of(exits), thread_places(exits)
    from safelaunch.rundir import calls_file

    written = calls_file.read_all(outcome.attempt_dir)  # the ranks' call ledgers, read once
    blocked = {r: {c.where for c in ledger.calls if c.blocked} for r, ledger in written.items()}
    hang = analyse_hang(outcome, lingering, blocked)
    survivors = (
        where_they_were(outcome.survivors.evidence, lingering, blocked) if outcome.survivors else ()
    )
    # torch's analyser costs an import of torch: only when something went wrong
    collectives = (
        for_attempt(outcome, hang)
        if outcome.status in (AttemptStatus.FAILED, AttemptStatus.HUNG)
        else None
    )
    if no_cause:
        klass = hang_class(hang) if hang else None
        places = _places(outcome, hang, heartbeat_dir)
        return Diagnosis(
            verdict=_weigh(
                None,
                hang,
                collectives,
                texts,
                outcome,
                places,
                survivors,
                threads,
                written,
                leaves_of(exits),
            ),
            places=places,
            root_cause=None,
            error=None,
            hang=hang,
            klass=klass,
            signature=UNEVEN_ITERATIONS if hang is not None and hang.uneven else None,
            non_finite=non_finite,
            collectives=collectives,
            stragglers=stragglers,
            survivors=survivors,
        )
    leaves = leaves_of(exits)
    beats = read_counts(heartbeat_dir, [r.rank for r in outcome.ranks])
    evidence = [evidence_of(r, texts[r.rank], leaves.get(r.rank), beats) for r in outcome.ranks]
    found = find_root_cause(evidence, table)
    if found is None:  # not reached: with a failed rank there is always a root cause
        return Diagnosis(root_cause=None, error=None, hang=hang, non_finite=non_finite)
    places = _places(outcome, hang, heartbeat_dir, survivors)
    verdict = _weigh(found, hang, collectives, texts, outcome, places, survivors, threads, written)
    found = follow_verdict(found, verdict, evidence, table)
    root = next(r for r in outcome.ranks if r.rank == found.rank)
    seqs = read_seqs(heartbeat_dir, [r.rank for r in outcome.ranks]) if found.left_early else {}
    return Diagnosis(
        root_cause=root,
        error=found.error,
        klass=found.klass,
        signature=found.signature,
        evidence=found.evidence,
        consequences=found.consequences,
        non_finite=non_finite,
        collectives=collectives,
        stragglers=stragglers,
        crashed_at_exit=found.crashed_at_exit,
        left_early=found.left_early,
        leaves=leaves,
        seqs=seqs,
        last_lines=() if found.error else tuple(last_lines(texts[root.rank])),
        seen=found.seen,
        verdict=verdict,
        places=places,
        nccl=_nccl(outcome),
        survivors=survivors,
    )


def _nccl(outcome: Outcome) -> bool:
    """Whether NCCL's advice can apply: a rank asked for or used it, or none said."""
    from safelaunch.rundir import comm_file

    records = comm_file.read_all(outcome.attempt_dir).values()
    named = {str(b).lower() for r in records for b in (r.requested, r.used) if b is not None}
    return (
        not records
        or any("nccl" in b for b in named)
        or any(r.requested is None and r.used is None for r in records)
    )


def _places(
    outcome: Outcome,
    hang: HangAnalysis | None,
    heartbeat_dir: Path | None,
    survivors: Sequence[Whereabouts] = (),
) -> tuple[RankPlace, ...]:
    """Where every rank was: a hang's stacks, or the survivors' of a failure, else the
    last heartbeat records."""
    from safelaunch.diagnose.jobwide import RankPlace, places

    fresher = {}
    for group in (*(hang.groups if hang is not None else ()), *survivors):
        for rank in group.ranks:
            fresher[rank] = RankPlace(
                rank=rank,
                activity=group.activity,
                location=group.location,
                waiting=group.waiting,
                seq=group.seqs[0] if len(group.seqs) == 1 else None,
                ended=None,
            )
    ended = {
        r.rank: r.how_it_ended()
        for r in outcome.ranks
        if r.state in (RankEnding.FAILED, RankEnding.SUCCEEDED)
    }
    return places(heartbeat_dir, [r.rank for r in outcome.ranks], ended, fresher)


def _weigh(
    found: RootCause | None,
    hang: HangAnalysis | None,
    collectives: Forensics | None,
    texts: Mapping[int, str],
    outcome: Outcome,
    places: Sequence[RankPlace],
    survivors: Sequence[Whereabouts] = (),
    threads: Mapping[int, str] | None = None,
    written: Mapping[int, CallLedger] | None = None,
    leaves: Mapping[int, Leave] | None = None,
) -> Verdict:
    """Every source's items, weighed by the arbiter; a culprit without a place of its own
    is placed where the hang's stacks, else its last heartbeat record, saw it.
    `threads`: where a rank's lingering non-daemon threads are (leaving.thread_places).
    `written`: the ranks' call ledgers as read (else read here); the collectives from C++
    they do not hold are put back from the flight records (unseen_calls.py)."""
    from dataclasses import replace

    from safelaunch.diagnose import witnesses as w
    from safelaunch.diagnose.arbiter import decide
    from safelaunch.diagnose.ledger_items import items_of_ledgers, last_groups
    from safelaunch.diagnose.unseen_calls import issued_by_flights, with_unseen
    from safelaunch.rundir import calls_file, flight_file

    flights = issued_by_flights(flight_file.read_ours(flight_file.directory(outcome.attempt_dir)))
    if written is None:
        written = calls_file.read_all(outcome.attempt_dir)
    ledgers = with_unseen(written, flights)
    first = w.first_failure(found) if found is not None else None
    here = [r.rank for r in outcome.ranks]  # this node's: another node's hold no ledger here
    # the failed ranks that stopped inside a call (a timeout, a mismatch): they waited in it
    failed_inside = [
        r.rank
        for r in outcome.ranks
        if r.state == RankEnding.FAILED
        and any(c.blocked for c in getattr(ledgers.get(r.rank), "calls", ()))
    ]
    items = [
        *([first] if first is not None else []),
        *w.survivor_items(survivors, first, threads or {}, failed_inside),
        *w.flight_items(collectives, _waiting(places, ledgers), ledgers),
        *w.hang_items(hang, threads or {}),
        *w.exit_items(hang, leaves or {}),
        *w.error_text_items(texts, here, last_groups(ledgers)),
        *items_of_ledgers(ledgers, _elsewhere(survivors, first), here),
        *w.peer_address_items(texts, outcome.attempt_dir),
    ]
    verdict = decide(items)
    if verdict.culprits and verdict.location() is None and verdict.decided_by is not None:
        where = {p.rank: p.location for p in places if p.location}
        if len(verdict.culprits) == 1 and verdict.culprits[0] in where:
            placed = replace(verdict.decided_by, location=where[verdict.culprits[0]])
            verdict = replace(verdict, decided_by=placed)
    return verdict


def _waiting(places: Sequence[RankPlace], ledgers: Mapping[int, CallLedger]) -> list[int]:
    """The ranks waiting in a call: their stacks inside torch.distributed, or their ledger
    blocked in a call (an irecv's wait() has no torch frame of its own)."""
    blocked = [r for r, ledger in ledgers.items() if any(c.blocked for c in ledger.calls)]
    return sorted({p.rank for p in places if p.waiting} | set(blocked))


def _elsewhere(survivors: Sequence[Whereabouts], first: Item | None) -> list[int]:
    """The survivors outside any call, their script not ended, where the first failure
    only waited (a timeout) or followed a peer (witnesses.survivor_items says why)."""
    from safelaunch.diagnose.arbiter import Tier

    if first is None or first.tier != Tier.FIRST_FAILURE:
        return []
    return [r for g in survivors if not g.waiting and g.frames and not g.ended for r in g.ranks]


def describe_ending(outcome: Outcome, diagnosis: Diagnosis) -> str:
    """One line: how an attempt or rerun ended, root cause first (error, file:line)."""
    if outcome.status == AttemptStatus.HUNG:
        hang = diagnosis.hang
        if hang is not None and hang.culprits:
            return f"hung; likely culprit rank {','.join(map(str, hang.culprits))}: {hang.reason}"
        return "hung" + (f": {hang.reason}" if hang is not None else "")
    root = diagnosis.root_cause
    if root is None:
        return outcome.status
    what = diagnosis.signature.id if diagnosis.signature else (diagnosis.klass or "unknown")
    from safelaunch.diagnose.leaving import left_collectives

    left = left_collectives(diagnosis.leaves.get(root.rank)) if diagnosis.left_early else None
    line = f"rank {root.rank} {left or root.how_it_ended()} ({what})"
    if diagnosis.error is not None:
        line += f": {diagnosis.error.line}"
        if diagnosis.error.location:
            line += f" at {diagnosis.error.location}"
    elif diagnosis.evidence:
        line += f": {diagnosis.evidence}"
    return line
