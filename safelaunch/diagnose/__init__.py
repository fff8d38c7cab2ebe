"""Diagnose: which rank really failed first, what kind of failure it is, what to do.

Reads logs only. The error text comes from the error file (torch elastic's
`@record`) when there is one, else from the last traceback in the rank's log; the
class, meaning and next steps from the knowledge base (signatures.py). A rank whose
log shows only the consequences of a peer's death is never the root cause.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from safelaunch.diagnose import stragglers as arrival
from safelaunch.diagnose.collectives import Forensics, for_attempt
from safelaunch.diagnose.frames import RANK_MARKER, user_frame
from safelaunch.diagnose.hang import HangAnalysis, analyse_hang
from safelaunch.diagnose.match import Match, cause, matches, non_finite_loss
from safelaunch.diagnose.reading import read_tail as read_tail  # re-exported
from safelaunch.diagnose.signatures import COMMUNICATION, SIGNATURES, UNKNOWN, Signature
from safelaunch.diagnose.stragglers import Arrivals
from safelaunch.outcome import FAILED, HUNG, Outcome, RankResult

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorText:
    """The exception line and the innermost frame in the user's own code."""

    line: str
    location: str | None
    source: str  # "error file" | "log"


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    """What went wrong, as far as this stage can tell."""

    root_cause: RankResult | None
    error: ErrorText | None
    hang: HangAnalysis | None = None
    klass: str | None = None  # one of the five classes, or unknown; None on success
    signature: Signature | None = None
    evidence: str | None = None  # the log line that matched the signature
    consequences: tuple[tuple[int, str], ...] = ()  # (rank, signature id): failed because of it
    non_finite: tuple[tuple[int, str], ...] = ()  # (rank, line): NaN/inf losses in the logs
    crashed_at_exit: bool = False  # a Python error came first, then the shutdown crash
    collectives: Forensics | None = None  # where the ranks' flight records diverge
    stragglers: Arrivals | None = None  # arrival order at the collectives; the straggler


def parse_traceback(text: str) -> tuple[str, str | None] | None:
    """(exception line, user location) of the last traceback in `text`."""
    lines = [RANK_MARKER.sub("", line) for line in text.splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if not starts:
        return None
    frames: list[tuple[str, str, str]] = []
    for line in lines[starts[-1] + 1 :]:
        match = _FRAME.match(line)
        if match:
            frames.append((match["path"], match["line"], match["func"]))
        elif line and not line[0].isspace():
            return line.strip(), user_frame(frames[::-1], fallback=True)
    return None


def from_error_file(path: Path) -> ErrorText | None:
    """The message `@record` wrote, if it did."""
    try:
        payload = json.loads(path.read_text(errors="replace"))
        message = payload["message"]
        if isinstance(message, str):
            return ErrorText(line=message.strip(), location=None, source="error file")
        stack = message.get("extraInfo", {}).get("py_callstack", "")
        parsed = parse_traceback(stack)
        line = str(message.get("message", "")).strip() or (parsed[0] if parsed else "")
        return ErrorText(line=line, location=parsed[1] if parsed else None, source="error file")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def from_log(path: Path, text: str | None = None) -> ErrorText | None:
    """The last traceback, or a fatal native-crash line, in the rank's log."""
    text = read_tail(path) if text is None else text
    parsed = parse_traceback(text)
    if parsed:
        return ErrorText(line=parsed[0], location=parsed[1], source="log")
    fatal = [line for line in text.splitlines() if line.startswith("Fatal Python error:")]
    if fatal:
        return ErrorText(line=fatal[-1].strip(), location=None, source="log")
    return None


def _root_cause(failed: list[RankResult], found: dict[int, list[Match]]) -> RankResult:
    """The earliest failure that is not only a consequence of another rank's."""
    for result in failed:
        if not found[result.rank] or cause(found[result.rank]) is not None:
            return result
    return failed[0]


def diagnose(outcome: Outcome, table: Sequence[Signature] = SIGNATURES) -> Diagnosis:
    """Root cause, class, signature and next steps; NaN/inf losses in any rank's log."""
    texts = {r.rank: read_tail(r.log_path) for r in outcome.ranks}
    non_finite = tuple(
        (rank, line) for rank, text in texts.items() if (line := non_finite_loss(text))
    )
    hang = analyse_hang(outcome)
    # torch's analyser costs an import of torch: only when something went wrong
    collectives = for_attempt(outcome, hang) if outcome.status in (FAILED, HUNG) else None
    stragglers = arrival.for_attempt(outcome.attempt_dir)
    failed = sorted((r for r in outcome.ranks if r.state == FAILED), key=lambda r: r.ended_after)
    if outcome.first_failure is None or not failed:
        klass = COMMUNICATION if hang else None
        return Diagnosis(
            root_cause=None,
            error=None,
            hang=hang,
            klass=klass,
            non_finite=non_finite,
            collectives=collectives,
            stragglers=stragglers,
        )
    found = {r.rank: matches(texts[r.rank], r.signal, table) for r in failed}
    root = _root_cause(failed, found)
    match = cause(found[root.rank])
    consequences = tuple(
        (r.rank, found[r.rank][0].signature.id)
        for r in failed
        if r.rank != root.rank and found[r.rank] and cause(found[r.rank]) is None
    )
    error = from_error_file(root.error_file) or from_log(root.log_path, texts[root.rank])
    # A traceback before the shutdown crash is the real failure; the abort is how it ended.
    # faulthandler's own "Fatal Python error: Aborted" line is the crash, not a Python error.
    python_error = error is not None and not error.line.startswith("Fatal Python error")
    crashed_at_exit = bool(match and match.signature.id == "shutdown-crash" and python_error)
    if crashed_at_exit:
        match = None
    return Diagnosis(
        root_cause=root,
        error=error,
        klass=match.signature.klass if match else UNKNOWN,
        signature=match.signature if match else None,
        evidence=match.line if match else None,
        consequences=consequences,
        non_finite=non_finite,
        crashed_at_exit=crashed_at_exit,
        collectives=collectives,
        stragglers=stragglers,
    )


def describe_ending(outcome: Outcome, diagnosis: Diagnosis) -> str:
    """One line: how an attempt or rerun ended, root cause first (error, file:line)."""
    if outcome.status == HUNG:
        hang = diagnosis.hang
        if hang is not None and hang.culprits:
            return f"hung; likely culprit rank {','.join(map(str, hang.culprits))}: {hang.reason}"
        return "hung" + (f": {hang.reason}" if hang is not None else "")
    root = diagnosis.root_cause
    if root is None:
        return outcome.status
    what = diagnosis.signature.id if diagnosis.signature else (diagnosis.klass or "unknown")
    line = f"rank {root.rank} {root.how_it_ended()} ({what})"
    if diagnosis.error is not None:
        line += f": {diagnosis.error.line}"
        if diagnosis.error.location:
            line += f" at {diagnosis.error.location}"
    elif diagnosis.evidence:
        line += f": {diagnosis.evidence}"
    return line
