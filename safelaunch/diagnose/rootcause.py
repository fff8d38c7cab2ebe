"""The one root-cause rule, for a live run, for `explain` and across nodes alike.

Both build a RankEvidence per rank (the live path from exit statuses and heartbeat
files, explain from report.json or torchrun's logs) and call find_root_cause: the
same evidence gives the same rank, class and location whichever path read it. The
multi-node verdict (nodes.py) applies the same core, first_cause and after_cause, to
the nodes' failures: the earliest real failure is the cause, what only followed it
(a peer's "Connection closed") comes after, and what safelaunch stopped is no failure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from safelaunch.diagnose.arbiter import Verdict
from safelaunch.diagnose.errortext import ErrorSource, ErrorText, error_text, last_lines
from safelaunch.diagnose.layerclass import Stage, describe, layer_class
from safelaunch.diagnose.layers import read_fault
from safelaunch.diagnose.leaving import EXIT_CALLS, Leave, exit_call, left_collectives
from safelaunch.diagnose.match import Match, cause, in_worker, matches
from safelaunch.diagnose.pytypes import EXCEPTION_TYPES, RANK_LEFT_EARLY
from safelaunch.diagnose.signatures import SIGNATURES, Signature
from safelaunch.vocab import UNKNOWN, FailureClass


@dataclass(frozen=True, slots=True, kw_only=True)
class RankEvidence:
    """What is known of one rank's end."""

    rank: int
    text: str  # the end of its log
    failed: bool  # ended non-zero or by a signal (or, code unknown: its log shows an error)
    ended: float | None = None  # when it ended, or where it shows up in a combined log
    code: int | None = None  # its exit code, when known (0: it ended cleanly)
    signum: int | None = None
    error_file: Path | None = None
    leave: Leave | None = None  # it ended without an uncaught error (bootstrap's record)
    # its last heartbeat record: collectives issued (`beat` and None: it never joined a group)
    seq: int | None = None
    beat: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RootCause:
    """The rank that really failed first, and what the knowledge base says of it."""

    rank: int
    error: ErrorText | None
    signature: Signature | None
    evidence: str | None  # the log line that matched the signature
    klass: FailureClass
    consequences: tuple[tuple[int, str], ...]
    crashed_at_exit: bool = False  # a Python error came first, then the shutdown crash
    left_early: bool = False  # it ended while its peers still communicated
    seen: str | None = None  # class unknown: what its traceback's layers showed (layerclass.py)


Failure = TypeVar("Failure")

# Errors that say only that the rank waited for a peer, or saw the peers disagree: the rank
# that raised one first is often not the one that broke the job (diagnose/arbiter.py).
WAITING = frozenset({"collective-timeout", "collective-mismatch", "store-clients-missing"})


def first_cause(
    failures: Sequence[Failure],
    real: Callable[[Failure], bool],
    hinted: Callable[[Failure], bool] | None = None,
) -> Failure | None:
    """The root cause among `failures`, ordered earliest first; None when there are none.

    A hinted real failure, else the earliest real one (not only a consequence of
    another's), else the earliest failure of all. Callers leave out what safelaunch
    stopped: it never failed.
    """
    causes = [f for f in failures if real(f)]
    hint = [f for f in causes if hinted(f)] if hinted is not None else []
    candidates = hint or causes or list(failures)
    return candidates[0] if candidates else None


def after_cause(
    failures: Sequence[Failure], root: Failure | None, real: Callable[[Failure], bool]
) -> list[Failure]:
    """The failures that only followed another's (consequences), in their order, root left out."""
    return [f for f in failures if f is not root and not real(f)]


def _order(rank: RankEvidence) -> tuple[float, int]:
    return (rank.ended if rank.ended is not None else math.inf, rank.rank)


def _left_early(
    ranks: Sequence[RankEvidence], failed: list[RankEvidence], real: list[RankEvidence]
) -> RankEvidence | None:
    """A rank that stopped taking part with no error while the failures are only consequences.

    Either a rank that exited 0 (or left without saying why) before the first failure,
    or one that destroyed its default group (its exit record says after which collective)
    and did not fail: it left the collectives then, whenever its process ended (it may go
    on with local work until safelaunch stops it). Or the first "real" failure when it has
    no error at all and every other failure is a consequence: it just left.
    """
    if not failed or real:
        return None
    first = failed[0]
    quiet = [
        r
        for r in ranks
        if not r.failed
        and (r.code == 0 or r.leave is not None)
        and (
            left_collectives(r.leave) is not None
            or first.ended is None
            or r.ended is None
            or r.ended <= first.ended
        )
    ]
    return min(quiet, key=_order) if quiet else None


def _own_code(rank: RankEvidence) -> bool:
    """It chose to fail: a non-zero exit code of its own (sys.exit(3), sys.exit("message")).

    Not "left early" then, even with no traceback: the program said it failed, and why is
    in what it printed last. A code of 0, or none known, while its peers still
    communicated stays a rank that left early.
    """
    if rank.leave is not None and isinstance(rank.leave.code, str):
        return True
    return rank.signum is None and rank.code is not None and rank.code != 0


# A line that reads as the program's own error message (`ERROR: ...`, `... not found`).
_MESSAGE = re.compile(
    r"\b(?:error|fatal|fail(?:ed|ure|s)?|abort(?:ed|ing)?|exception|cannot|can't|could not|"
    r"unable|not found|no such|missing|invalid|denied|refused)\b",
    re.IGNORECASE,
)


def _exit_message(rank: RankEvidence) -> ErrorText | None:
    """What a rank that exited with a code of its own printed last: the last line that reads
    as an error message (else its last line), placed where it called sys.exit."""
    lines = last_lines(rank.text)
    where = rank.leave.location if rank.leave is not None else None
    line = next((line for line in reversed(lines) if _MESSAGE.search(line)), None)
    if line is None and lines:
        line = lines[-1]
    if line is not None:
        return ErrorText(line=line, location=where, source=ErrorSource.LOG)
    if rank.leave is not None and rank.leave.how in EXIT_CALLS:  # it printed nothing
        line = exit_call(rank.leave)
        return ErrorText(line=line, location=where, source=ErrorSource.EXIT_RECORD)
    return None


def _called_exit(rank: RankEvidence) -> bool:
    return rank.leave is not None and rank.leave.how in EXIT_CALLS


def _leaving_error(leave: Leave) -> ErrorText | None:
    """Where a rank that left early left: destroy_process_group, or the sys.exit it called."""
    if left_collectives(leave) is not None:
        after = f" after collective #{leave.left_at}" if leave.left_at is not None else ""
        return ErrorText(
            line=f"destroy_process_group(){after} while the other ranks still communicated",
            location=leave.location,
            source=ErrorSource.EXIT_RECORD,
        )
    if leave.how in EXIT_CALLS:
        return ErrorText(
            line=f"{exit_call(leave)} while the other ranks still communicated",
            location=leave.location,
            source=ErrorSource.EXIT_RECORD,
        )
    return None


def _no_error(rank: RankEvidence, found: list[Match]) -> bool:
    return not found and error_text(rank.text, rank.error_file) is None


def signature_matches(
    ranks: Sequence[RankEvidence], table: Sequence[Signature] = SIGNATURES
) -> dict[int, list[Match]]:
    """Every rank's signatures, as the rules below read them: a caller that judges more
    than once (explain: 128 ranks' logs of a SLURM .out) matches once and hands them in."""
    return {r.rank: matches(r.text, r.signum, table) for r in ranks}


def find_root_cause(
    ranks: Sequence[RankEvidence],
    table: Sequence[Signature] = SIGNATURES,
    hint: int | None = None,
    matched: Mapping[int, list[Match]] | None = None,
) -> RootCause | None:
    """The earliest failure that is not only a consequence of another rank's; None if none.

    `hint`: the rank a launcher named as its root cause (torchrun's "Root Cause" block),
    preferred among the real failures. `matched`: signature_matches(ranks, table).
    """
    failed = sorted((r for r in ranks if r.failed), key=_order)
    found = matched if matched is not None else signature_matches(ranks, table)

    def is_real(rank: RankEvidence) -> bool:  # its log shows a cause, or nothing known
        return not found[rank.rank] or cause(found[rank.rank]) is not None

    real = [r for r in failed if is_real(r)]
    leaver = _left_early(ranks, failed, real)
    root = leaver or first_cause(failed, is_real, lambda r: r.rank == hint)
    if root is None:
        return None
    followed = after_cause(failed, root, is_real)
    left = leaver is not None or (
        bool(followed) and _no_error(root, found[root.rank]) and not _own_code(root)
    )
    consequences = tuple((r.rank, found[r.rank][0].signature.id) for r in followed)
    error = error_text(root.text, root.error_file)
    if left and error is None and root.leave is not None:
        # where it left is the line to look at: the bootstrap's exit record says where
        error = _leaving_error(root.leave)
    elif error is None and _own_code(root) and (followed or _called_exit(root)):
        # its peers failed for it, or it called sys.exit itself: what it printed is the
        # error, and where it exited the place (with neither, its last lines are the lead)
        error = _exit_message(root)
    match = cause(found[root.rank]) if not left else None
    # A traceback before the shutdown crash is the real failure; the abort is how it ended.
    python_error = error is not None and not error.line.startswith("Fatal Python error")
    crashed_at_exit = bool(match and match.signature.id == "shutdown-crash" and python_error)
    if crashed_at_exit:
        match = None
    seen = None
    if match is None and error is not None and not left and found[root.rank]:
        # its log shows only consequences of a peer's failure: no layer makes it a cause
        match = next(iter(matches(error.line, None, EXCEPTION_TYPES)), None)
    elif match is None and error is not None and not left:
        match, seen = _from_layers(root, error)
    match = in_worker(match, error.line if error else None)
    signature = RANK_LEFT_EARLY if left else (match.signature if match else None)
    return RootCause(
        rank=root.rank,
        error=error,
        signature=signature,
        evidence=match.line if match else None,
        klass=signature.klass if signature else UNKNOWN,
        consequences=consequences,
        crashed_at_exit=crashed_at_exit,
        left_early=left,
        seen=seen,
    )


def _from_layers(rank: RankEvidence, error: ErrorText) -> tuple[Match | None, str | None]:
    """No signature fits: the traceback's layers (their context rows), the exception's type,
    the layers' general rows (layerclass.py); else what the layers
    showed, for an honest "unknown". A context row and a type that agree on the class
    give the type's (more precise) advice; where they disagree the context decides."""
    fault = read_fault(rank.text, signum=rank.signum, seq=rank.seq, beat=rank.beat)
    typed = next(iter(matches(error.line, None, EXCEPTION_TYPES)), None)
    if fault is None:
        return typed, None
    found = layer_class(fault, Stage.CONTEXT)
    if typed is not None and (found is None or found.klass == typed.signature.klass):
        return typed, None  # where both agree, the type's advice is the more precise
    if found is None:
        found = layer_class(fault, Stage.GENERAL)
    if found is not None:
        return Match(signature=found, line=describe(fault)), None
    return None, describe(fault)


def named_cause(
    ranks: Sequence[RankEvidence],
    rank: int,
    why: ErrorText,
    klass: FailureClass,
    table: Sequence[Signature] = SIGNATURES,
    matched: Mapping[int, list[Match]] | None = None,
) -> RootCause:
    """The root cause the arbiter named (diagnose/arbiter.py) rather than the first failure.

    Its own error where it failed with one that is no consequence (the rule run with it as
    the hint); else `why`, what the evidence says it did, and every failure is one of its
    consequences.
    """
    found = matched if matched is not None else signature_matches(ranks, table)
    own = find_root_cause(ranks, table, hint=rank, matched=found)
    if own is not None and own.rank == rank:
        return own
    # what the first failure waited for or detected is what the culprit did: its advice fits
    waited = own.signature if own is not None and own.signature is not None else None
    consequences = tuple(
        (r.rank, found[r.rank][0].signature.id if found[r.rank] else "error")
        for r in sorted((r for r in ranks if r.failed and r.rank != rank), key=_order)
    )
    return RootCause(
        rank=rank,
        error=why,
        signature=waited if waited is not None and waited.id in WAITING else None,
        evidence=None,
        klass=klass,
        consequences=consequences,
    )


def follow_verdict(
    found: RootCause,
    verdict: Verdict,
    ranks: Sequence[RankEvidence],
    table: Sequence[Signature] = SIGNATURES,
    matched: Mapping[int, list[Match]] | None = None,
) -> RootCause:
    """The root cause is the arbiter's one culprit where the evidence names another rank
    than the first failure (the summary, exit code, report and explain follow it)."""
    decided = verdict.decided_by
    if len(verdict.culprits) != 1 or verdict.culprits[0] == found.rank or decided is None:
        return found
    why = ErrorText(line=decided.says, location=verdict.location(), source=ErrorSource.EVIDENCE)
    klass = verdict.klass() or found.klass
    return named_cause(ranks, verdict.culprits[0], why, klass, table, matched)
