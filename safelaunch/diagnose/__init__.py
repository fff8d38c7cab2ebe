"""Diagnose: the root cause's error text and where in the user's code it happened.

Reads logs only. The error file (torch elastic's `@record`) wins over the log;
without it, the last traceback in the rank's log is used.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from safelaunch.diagnose.hang import HangAnalysis, analyse_hang
from safelaunch.outcome import Outcome, RankResult

LOG_TAIL = 1 << 20  # tracebacks are at the end; a huge log is not read whole
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
_RANK_MARKER = re.compile(r"^\[rank\d+\]:\s?")
_LIBRARY_PARTS = ("site-packages", "dist-packages", "/lib/python", "<frozen")


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


def user_location(frames: list[tuple[str, str, str]]) -> str | None:
    """Innermost frame outside installed libraries as `path:line in func`."""
    if not frames:
        return None
    own = [f for f in frames if not any(part in f[0] for part in _LIBRARY_PARTS)]
    path, line, func = (own or frames)[-1]
    return f"{path}:{line} in {func}"


def parse_traceback(text: str) -> tuple[str, str | None] | None:
    """(exception line, user location) of the last traceback in `text`."""
    lines = [_RANK_MARKER.sub("", line) for line in text.splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if not starts:
        return None
    frames: list[tuple[str, str, str]] = []
    for line in lines[starts[-1] + 1 :]:
        match = _FRAME.match(line)
        if match:
            frames.append((match["path"], match["line"], match["func"]))
        elif line and not line[0].isspace():
            return line.strip(), user_location(frames)
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


def from_log(path: Path) -> ErrorText | None:
    """The last traceback, or a fatal native-crash line, in the rank's log."""
    try:
        with path.open("rb") as log:
            log.seek(0, 2)
            log.seek(max(0, log.tell() - LOG_TAIL))
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return None
    parsed = parse_traceback(text)
    if parsed:
        return ErrorText(line=parsed[0], location=parsed[1], source="log")
    fatal = [line for line in text.splitlines() if line.startswith("Fatal Python error:")]
    if fatal:
        return ErrorText(line=fatal[-1].strip(), location=None, source="log")
    return None


def diagnose(outcome: Outcome) -> Diagnosis:
    """Find the root cause's error text."""
    cause = outcome.first_failure
    if cause is None:
        return Diagnosis(root_cause=None, error=None, hang=analyse_hang(outcome))
    error = from_error_file(cause.error_file) or from_log(cause.log_path)
    return Diagnosis(root_cause=cause, error=error)
