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
from dataclasses import dataclass
from functools import cache
from typing import Any

try:
    import re2  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - exercised by a subprocess test
    re2 = None

from safelaunch.diagnose.frames import RANK_MARKER
from safelaunch.diagnose.signatures import SIGNATURES, Signature

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


# A loss printed as nan/inf, even when nothing raised ("loss nan", "loss=inf", "'loss': nan").
_NON_FINITE_LOSS = compile_pattern(r"(?i)loss\W{0,4}(-?nan|-?inf)\b")


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
    hit = _NON_FINITE_LOSS.search(text)
    return _line_at(text, hit.start()) if hit else None
