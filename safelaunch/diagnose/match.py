"""Matching the knowledge base against a rank's log and exit signal.

Every pattern, built-in or the user's, runs on RE2 (google-re2): matching takes time
linear in the log, whatever the pattern. Python's `re` backtracks: `x .* y` over a long
line of `x x x ...` is quadratic (a 1 MB line took minutes), and a user's `(a+)+$` is
exponential. RE2 has no backreferences or lookaround; user patterns are checked against
it when their file is read (user_signatures.py).

Without google-re2 (a minimal or offline image: the GPU machines' image lacks the wheel) the
launcher must still start and diagnose: Python's `re` runs the same patterns, on lines cut
to FALLBACK_LINE_CHARS, which bounds the backtracking per line instead of removing it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from itertools import islice
from typing import Any

try:
    import re2  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - exercised by a subprocess test
    re2 = None

from safelaunch.diagnose.frames import RANK_MARKER
from safelaunch.diagnose.pytypes import EXCEPTION_TYPES, LOSS, non_finite
from safelaunch.diagnose.signatures import SIGNATURES, Signature
from safelaunch.vocab import RESOURCES

EVIDENCE_CHARS = 400  # the matched line as shown: a 1 MB progress-bar line is cut around the hit


FALLBACK_LINE_CHARS = 4096  # without RE2: what `re` sees of each line
PATTERN_ERROR: type[Exception] = re.error if re2 is None else re2.error


def _options() -> Any:
    if re2 is None:
        return None
    options = re2.Options()
    options.log_errors = False  # a bad user pattern is reported once, as a ConfigError
    return options


OPTIONS = _options()


def compile_pattern(pattern: str) -> Any:
    """An RE2 pattern (PATTERN_ERROR for what it cannot run); `re` where RE2 is missing."""
    if re2 is None:
        return re.compile(pattern)
    return re2.compile(pattern, OPTIONS)


def _bounded(text: str) -> str:
    """The text as the engine may search it: whole with RE2, long lines cut for `re`."""
    if re2 is not None:
        return text
    return "\n".join(line[:FALLBACK_LINE_CHARS] for line in text.split("\n"))


# A loss printed as nan/inf, even when nothing raised ("loss nan", "loss is NaN", "NaN loss").
_NON_FINITE_LOSS = compile_pattern(non_finite(LOSS))
# What stands before "loss" in "best_loss: inf", "best val loss inf": a best (lowest) loss
# so far starts at inf, which is no training gone bad.
_BEST_SO_FAR = re.compile(r"(?i)(?:best|min|lowest)(?:[_ ]\w+)?[_ /]$")
# A traceback's frame line: the line after it is source code (`assert loss == loss, "loss
# is nan"`), not a loss the run logged; the error line below says it, if anything does.
_FRAME_LINE = re.compile(r'File "[^"]*", line \d+')
_CANDIDATES = 100  # lines looked at, at most: 70,000 "best_loss: inf" lines took seconds
# torch's message for an error a DataLoader worker raised, re-raised in the rank
_WORKER_ERROR = "dataloader-worker-error"
_CAUGHT = re.compile(r"Caught (\w+) in DataLoader worker process")
_IN_WORKER = (
    "it happened in a DataLoader worker process: each worker has memory, open files and "
    "threads of its own; fewer workers (num_workers) need less"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Match:
    """A signature that fits, and the log line that made it fit (None for a signal)."""

    signature: Signature
    line: str | None


@cache
def _compiled(signature: Signature) -> tuple[Any, ...]:
    return tuple(compile_pattern(pattern) for pattern in signature.patterns)


def _line_at(text: str, position: int) -> str:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    end = end if end >= 0 else len(text)
    if end - start > EVIDENCE_CHARS:  # the hit and what follows it, not the whole line
        start = max(start, position - EVIDENCE_CHARS // 4)
        end = min(end, start + EVIDENCE_CHARS)
    return RANK_MARKER.sub("", text[start:end]).strip()


def matches(text: str, signum: int | None, table: Sequence[Signature] = SIGNATURES) -> list[Match]:
    """Every signature that fits, in table order (the first is the most specific)."""
    text = _bounded(text)
    found = []
    for signature in table:
        if signum is not None and signum in signature.signals:
            found.append(Match(signature=signature, line=None))
            continue
        for pattern in _compiled(signature):
            hit = pattern.search(text)
            if hit:
                found.append(Match(signature=signature, line=_line_at(text, hit.start())))
                break
    return found


def cause(found: Sequence[Match]) -> Match | None:
    """The first match that can be a root cause (not a consequence of a peer's death)."""
    return next((m for m in found if not m.signature.consequence), None)


def non_finite_loss(text: str) -> str | None:
    """The first line reporting a NaN/inf loss: training went bad even if nothing raised."""
    text = _bounded(text)
    for hit in islice(_NON_FINITE_LOSS.finditer(text), _CANDIDATES):
        subject = hit.start() + hit.group(0).lower().find("loss")
        line_start = text.rfind("\n", 0, subject) + 1
        if _BEST_SO_FAR.search(text, line_start, subject) or _source_line(text, line_start):
            continue
        return _line_at(text, hit.start())
    return None


def _source_line(text: str, line_start: int) -> bool:
    """The line at `line_start` is the source line of a traceback frame."""
    if line_start == 0:
        return False
    return _FRAME_LINE.search(text, text.rfind("\n", 0, line_start - 1) + 1, line_start) is not None


def in_worker(match: Match | None, error_line: str | None) -> Match | None:
    """A DataLoader worker's error, classed by what the worker raised when that is a resource.

    Memory, disk, open files or threads that ran out (in the worker's own error line, or
    the type torch names: "Caught MemoryError in DataLoader worker process 0") are no
    sample's fault: resources, with the worker said in the next steps. Anything else the
    worker raised stays the data error `match` is.
    """
    if match is None or match.signature.id != _WORKER_ERROR:
        return match
    caught = _CAUGHT.search(match.line or "")
    for text in (error_line or "", caught.group(1) if caught else ""):
        for found in matches(text, None, (*SIGNATURES, *EXCEPTION_TYPES)):
            own = found.signature
            if own.klass == RESOURCES and not own.consequence:
                worker = replace(
                    own,
                    meaning=f"in a DataLoader worker: {own.meaning}",
                    next_steps=(*own.next_steps[:3], _IN_WORKER),
                )
                return Match(signature=worker, line=match.line)
    return match
