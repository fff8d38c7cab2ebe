"""Matching the knowledge base against a rank's log and exit signal."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from safelaunch.diagnose.frames import RANK_MARKER
from safelaunch.diagnose.signatures import SIGNATURES, Signature

# A loss printed as nan/inf, even when nothing raised ("loss nan", "loss=inf", "'loss': nan").
_NON_FINITE_LOSS = re.compile(r"loss\W{0,4}(-?nan|-?inf)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Match:
    """A signature that fits, and the log line that made it fit (None for a signal)."""

    signature: Signature
    line: str | None


@cache
def _compiled(signature: Signature) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(pattern) for pattern in signature.patterns)


def _line_at(text: str, position: int) -> str:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    return RANK_MARKER.sub("", text[start : end if end >= 0 else len(text)]).strip()


def matches(text: str, signum: int | None, table: Sequence[Signature] = SIGNATURES) -> list[Match]:
    """Every signature that fits, in table order (the first is the most specific)."""
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
    hit = _NON_FINITE_LOSS.search(text)
    return _line_at(text, hit.start()) if hit else None
