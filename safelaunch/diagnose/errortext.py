"""A rank's error line and the user's file:line, read from its error file or its log.

In order: the message torch elastic's `@record` wrote; the last Python traceback;
a native abort (`terminate called after throwing ...` / `what():`), placed by the
faulthandler stack that follows it; faulthandler's own fatal error line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from safelaunch.diagnose.frames import DUMP_FRAME as _DUMP_FRAME
from safelaunch.diagnose.frames import RANK_MARKER, user_frame
from safelaunch.diagnose.frames import TRACEBACK_FRAME as _FRAME
from safelaunch.diagnose.reading import read_tail
from safelaunch.userfiles import load_json
from safelaunch.vocab import StrEnum

_TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")
_WHAT = re.compile(r"^\s*what\(\):\s*(?P<what>.*\S)")
_FATAL = "Fatal Python error:"
_WORKER_ERROR = re.compile(r"Caught \w+ in DataLoader worker process \d+")
_ORIGINAL = "Original Traceback (most recent call last):"
_ORIGINAL_WITHIN = 400  # lines after the re-raised error where the worker's traceback is
_BARE = re.compile(r"^[\w.]+$")  # an exception type alone: `AssertionError`, `EOFError`
_MORE_WITHIN = 3  # lines after an error ending in ":" where its message goes on
_MORE_CHARS = 500
# what follows an error line that is no part of its message
_NOT_MORE = ("Traceback (most recent", "During handling of", "The above exception", "File ")


class ErrorSource(StrEnum):
    """Where a rank's error line was read (report.json's error_source)."""

    ERROR_FILE = "error file"
    LOG = "log"
    EXIT_RECORD = "exit record"
    EVIDENCE = "evidence"  # no error of its own: what the culprit's evidence says it did


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorText:
    """The exception line and the innermost frame in the user's own code."""

    line: str
    location: str | None
    source: ErrorSource


def _frames_then_error(lines: list[str]) -> tuple[str, str | None, int] | None:
    """Frames up to the first unindented line: (the error, user location, its index)."""
    frames: list[tuple[str, str, str]] = []
    sources: dict[str, str] = {}  # a frame's `path:line in func` -> its source line
    for index, line in enumerate(lines):
        match = _FRAME.match(line)
        if match:
            frames.append((match["path"], match["line"], match["func"]))
            following = lines[index + 1] if index + 1 < len(lines) else ""
            if following[:1].isspace() and not _FRAME.match(following):
                sources[f"{match['path']}:{match['line']} in {match['func']}"] = following.strip()
        elif line and not line[0].isspace():
            location = user_frame(frames[::-1], fallback=True)
            source = sources.get(location or "", "")
            return _completed(line.strip(), lines[index + 1 :], source), location, index
    return None


def _completed(error: str, after: list[str], source: str) -> str:
    """The error line with what it leaves out: a message that goes on after a colon
    ("Error(s) in loading state_dict for Linear:" / "size mismatch for weight: ...") gets
    its next line; an exception with no message (a bare `assert x > 0`) gets the
    statement that raised it, unless that is only `raise TheType`."""
    if error.endswith(":"):
        more = next((line.strip() for line in after[:_MORE_WITHIN] if line.strip()), "")
        if more and not more.startswith(_NOT_MORE):
            return f"{error} {more}"[:_MORE_CHARS]
    if _BARE.match(error) and source and not source.startswith("raise "):
        return f"{error} (no message; the line: {source})"[:_MORE_CHARS]
    return error


def parse_traceback(text: str) -> tuple[str, str | None] | None:
    """(exception line, user location) of the last traceback in `text`.

    An error re-raised from a DataLoader worker ("Caught ValueError in DataLoader worker
    process 0") carries the worker's own traceback in its message: that one says where.
    """
    lines = [RANK_MARKER.sub("", line) for line in text.splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if not starts:
        return None
    found = _frames_then_error(lines[starts[-1] + 1 :])
    if found is None:
        return None
    line, location, index = found
    after = lines[starts[-1] + 2 + index :][:_ORIGINAL_WITHIN]
    if _WORKER_ERROR.search(line) and _ORIGINAL in after:
        original = _frames_then_error(after[after.index(_ORIGINAL) + 1 :])
        if original is not None and original[1] is not None:
            return original[0], original[1]
    return line, location


def from_error_file(path: Path | None) -> ErrorText | None:
    """The message `@record` wrote, if it did."""
    if path is None:
        return None
    try:
        # A rank writes this file: read with the checks a user's file gets (size, nesting,
        # a FIFO): json.loads would recurse through a file of a million "[" (RecursionError).
        payload = load_json(str(path))
        message = payload["message"]
        if isinstance(message, str):
            return ErrorText(line=message.strip(), location=None, source=ErrorSource.ERROR_FILE)
        stack = message.get("extraInfo", {}).get("py_callstack", "")
        parsed = parse_traceback(stack)
        line = str(message.get("message", "")).strip() or (parsed[0] if parsed else "")
        return ErrorText(
            line=line, location=parsed[1] if parsed else None, source=ErrorSource.ERROR_FILE
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _fault_location(lines: list[str], start: int) -> str | None:
    """The user's frame in the faulthandler dump after line `start`.

    The crashing thread's block ("Current thread") when it is a Python thread; when the
    abort came from a native thread (Gloo's, a C++ extension's), the main thread's (the
    block that runs the module), else the first block with a user frame.
    """
    blocks: list[tuple[bool, list[tuple[str, str, str]]]] = []
    for line in lines[start + 1 :]:
        if line.startswith(("Current thread", "Thread 0x")):
            blocks.append((line.startswith("Current thread"), []))
            continue
        match = _DUMP_FRAME.match(line)
        if match and blocks:
            blocks[-1][1].append((match["path"], match["line"], match["func"].strip()))
        elif line.strip() and blocks and blocks[-1][1]:
            break  # "Extension modules: ...": the dump is over
    ordered = sorted(blocks, key=lambda b: (not b[0], not any(f[2] == "<module>" for f in b[1])))
    for _, frames in ordered:
        found = user_frame(frames, also_skip=("<string>",))
        if found:
            return found
    return None


def native_error(text: str) -> ErrorText | None:
    """A C++ abort or a fatal signal: its message, placed by faulthandler's stack."""
    lines = [RANK_MARKER.sub("", line) for line in text.splitlines()]
    fatal = [i for i, line in enumerate(lines) if line.startswith(_FATAL)]
    if not fatal:
        terminate = [i for i, line in enumerate(lines) if _TERMINATE.search(line)]
        if not terminate:
            return None
    location = _fault_location(lines, fatal[-1]) if fatal else None
    for i in reversed(range(len(lines))):
        thrown = _TERMINATE.search(lines[i])
        if thrown is None:
            continue
        what = next((m["what"] for m in map(_WHAT.match, lines[i + 1 : i + 4]) if m), None)
        line = f"{thrown['type']}: {what}" if what else lines[i].strip()
        return ErrorText(line=line, location=location, source=ErrorSource.LOG)
    return ErrorText(line=lines[fatal[-1]].strip(), location=location, source=ErrorSource.LOG)


def from_log(path: Path | None, text: str | None = None) -> ErrorText | None:
    """The last traceback, or a native abort or fatal-signal line, in the rank's log."""
    if text is None:
        text = read_tail(path) if path is not None else ""
    parsed = parse_traceback(text)
    if parsed:
        return ErrorText(line=parsed[0], location=parsed[1], source=ErrorSource.LOG)
    return native_error(text)


def error_text(text: str, error_file: Path | None) -> ErrorText | None:
    """The error file's message, else the log's."""
    return from_error_file(error_file) or from_log(None, text)


def last_lines(text: str, count: int = 5) -> list[str]:
    """The last non-empty lines of a log, for a rank that ended without an error message."""
    lines = [RANK_MARKER.sub("", line).rstrip() for line in text.splitlines()]
    return [line[:200] for line in lines if line.strip()][-count:]
