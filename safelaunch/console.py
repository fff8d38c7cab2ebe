"""The launcher's terminal: rank output to stdout, its own messages to stderr.

Every write goes through one lock, so a launcher message never lands inside a
rank's line, and a console that went away (closed pipe, `| head`) is dropped
without stopping the job: the per-rank files still get everything. A console that
blocks (a pipe nobody reads) holds up neither the launcher log nor, past
LOCK_WAIT, the launcher's own messages.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import BinaryIO

LOCK_WAIT = 1.0  # seconds a message waits for a terminal write stuck on a full pipe
_YELLOW, _RED, _RESET = "\x1b[33m", "\x1b[31m", "\x1b[0m"


def color_wanted(mode: str, stream: BinaryIO | None = None) -> bool:
    """Resolve --color auto|always|never; auto means a TTY without NO_COLOR."""
    if mode == "always":
        return True
    if mode == "never" or os.environ.get("NO_COLOR"):
        return False
    target = stream if stream is not None else sys.stdout
    try:
        return target.isatty()
    except (AttributeError, ValueError, OSError):
        return False


class Console:
    """Serialised writes to the terminal plus a copy of our messages in the launcher log."""

    def __init__(
        self, out: BinaryIO | None = None, err: BinaryIO | None = None, color: bool = False
    ) -> None:
        self._out: BinaryIO | None = out if out is not None else sys.stdout.buffer
        self._err: BinaryIO | None = err if err is not None else sys.stderr.buffer
        self.color = color
        self._lock = threading.Lock()  # the terminal
        self._log_lock = threading.Lock()
        self._stuck = False  # a rank-output write held the terminal past LOCK_WAIT
        self._log_fd: int | None = None

    def attach_log(self, fd: int) -> None:
        """Copy launcher messages into `fd` (the attempt's launcher.log); we close it."""
        self.close_log()
        with self._log_lock:
            self._log_fd = fd

    def close_log(self) -> None:
        """Stop copying messages to the launcher log and close it."""
        with self._log_lock:
            if self._log_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._log_fd)
                self._log_fd = None

    def say(self, text: str, level: str = "info") -> None:
        """Print a launcher message, one `safelaunch:` prefix per line."""
        tag = {"warning": "warning: ", "error": "error: "}.get(level, "")
        lines = [f"safelaunch: {tag}{line}" if line else "" for line in text.split("\n")]
        plain = "\n".join(lines) + "\n"
        shown = plain
        if self.color and level in ("warning", "error"):
            colour = _YELLOW if level == "warning" else _RED
            shown = "".join(f"{colour}{line}{_RESET}\n" for line in lines)
        with self._log_lock:  # the log first: it never waits for the terminal
            if self._log_fd is not None:
                try:
                    os.write(self._log_fd, plain.encode("utf-8", "replace"))
                except OSError:
                    self._log_fd = None
        # Rank output stuck on a blocked stdout holds the lock: go round it rather
        # than wait (only a stuck console can then see a message inside its lines).
        locked = self._lock.acquire(timeout=0 if self._stuck else LOCK_WAIT)
        self._stuck = not locked  # wait once, not once per message
        try:
            self._err = _write(self._err, shown.encode("utf-8", "replace"))
        finally:
            if locked:
                self._lock.release()

    def emit(self, data: bytes) -> None:
        """Write already-prefixed whole lines of rank output."""
        with self._lock:
            self._out = _write(self._out, data)
            self._stuck = False


def _write(stream: BinaryIO | None, data: bytes) -> BinaryIO | None:
    """Write and flush; return None once the stream is unusable.

    A real file descriptor is written with os.write, past Python's buffer: a thread
    blocked on a full pipe then holds no lock of the interpreter's, which would make
    exiting with it still blocked a fatal error instead of the job's exit code.
    """
    if stream is None:
        return None
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        fd = None
    try:
        if fd is None:
            stream.write(data)
            stream.flush()
            return stream
        stream.flush()  # whatever went through the buffer goes first
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except (OSError, ValueError):
        return None
    return stream
