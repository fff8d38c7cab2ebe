"""The launcher's terminal: rank output to stdout, its own messages to stderr.

Every write goes through one lock, so a launcher message never lands inside a
rank's line, and a console that went away (closed pipe, `| head`, a stream closed
before we started) is dropped without stopping the job: the per-rank files still
get everything.

A console that blocks (a pipe nobody reads, a suspended `less`) never holds up the
launcher's decisions: a message goes to the launcher log first (a file), then to the
terminal only if that cannot block; otherwise it queues, in order, for a messenger
thread that waits for the terminal instead. `drain_messages` gives that thread a
bounded time at exit.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import threading
import time
from collections import deque
from typing import BinaryIO, TextIO

from safelaunch.vocab import StrEnum, Switch

LOCK_WAIT = 1.0  # seconds a queued message waits for a terminal write stuck on a full pipe
BACKLOG = 1000  # launcher messages held for a blocked terminal; later ones are counted
# A pipe takes a write of at most PIPE_BUF bytes whole or not at all: rank output goes
# out in such pieces, so what reached the terminal is known even while a write blocks.
PIECE = select.PIPE_BUF
_YELLOW, _RED, _RESET = "\x1b[33m", "\x1b[31m", "\x1b[0m"
_messengers: list[threading.Thread] = []  # those still writing queued messages


class Level(StrEnum):
    """A launcher message's: a warning or an error is tagged (and coloured) as one."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


def color_wanted(mode: Switch, stream: BinaryIO | None = None) -> bool:
    """Resolve --color auto|always|never; auto means a TTY without NO_COLOR."""
    if mode == Switch.ALWAYS:
        return True
    if mode == Switch.NEVER or os.environ.get("NO_COLOR"):
        return False
    target = stream if stream is not None else sys.stdout
    try:
        return target.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def drain_messages(timeout: float) -> None:
    """At exit: let queued launcher messages reach a slow terminal, for `timeout` at most."""
    until = time.monotonic() + timeout
    for thread in list(_messengers):
        thread.join(max(0.0, until - time.monotonic()))


class Sending:
    """Rank output on its way to the terminal: how much went out; stoppable from outside."""

    __slots__ = ("_lock", "_sent", "_stopped", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._sent = 0
        self._stopped = False
        self._lock = threading.Lock()

    def stop(self) -> int:
        """Write no more of it; return its lines that never reached the terminal whole.

        A piece still in flight counts as not shown: on a pipe it is written whole or
        not at all, and a terminal blocked this long is not expected to take it.
        """
        with self._lock:
            self._stopped = True
            return self.data.count(b"\n", self._sent)

    def went(self, count: int) -> bool:
        """`count` more bytes reached the terminal; False once stopped (write no more)."""
        with self._lock:
            if self._stopped:
                return False
            self._sent += count
            return True


class Console:
    """Serialised writes to the terminal plus a copy of our messages in the launcher log."""

    def __init__(
        self, out: BinaryIO | None = None, err: BinaryIO | None = None, color: bool = False
    ) -> None:
        # A standard stream closed before we started is None in sys: treated as /dev/null.
        self._out: BinaryIO | None = out if out is not None else buffer_of(sys.stdout)
        self._err: BinaryIO | None = err if err is not None else buffer_of(sys.stderr)
        self._missing = [n for n, s in (("stdout", self._out), ("stderr", self._err)) if s is None]
        self.color = color
        self._lock = threading.Lock()  # the terminal
        self._log_lock = threading.Lock()
        self._stuck = False  # a rank-output write held the terminal past LOCK_WAIT
        self._log_fd: int | None = None
        self._says = threading.Lock()  # the queue below and who writes it
        self._queued: deque[bytes] = deque()  # its head is being written
        self._unsaid = 0  # messages the full queue could not take
        self._messenger: threading.Thread | None = None

    def attach_log(self, fd: int) -> None:
        """Copy launcher messages into `fd` (the attempt's launcher.log); we close it."""
        self.close_log()
        with self._log_lock:
            self._log_fd = fd
        if self._missing:
            self._to_log(
                f"safelaunch: {' and '.join(self._missing)} closed when the launcher started: "
                "shown nowhere (the logs have everything)\n"
            )

    def close_log(self) -> None:
        """Stop copying messages to the launcher log and close it."""
        with self._log_lock:
            if self._log_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._log_fd)
                self._log_fd = None

    def say(self, text: str, level: Level = Level.INFO) -> None:
        """Print a launcher message, one `safelaunch:` prefix per line; never blocks."""
        tag = f"{level}: " if level != Level.INFO else ""
        lines = [f"safelaunch: {tag}{line}" if line else "" for line in text.split("\n")]
        plain = "\n".join(lines) + "\n"
        shown = plain
        if self.color and level != Level.INFO:
            colour = _YELLOW if level == Level.WARNING else _RED
            shown = "".join(f"{colour}{line}{_RESET}\n" for line in lines)
        self._to_log(plain)  # the log first: it never waits for the terminal
        self._tell(shown.encode("utf-8", "replace"))

    def emit(self, data: bytes) -> None:
        """Write already-prefixed whole lines of rank output."""
        self.send(Sending(data))

    def send(self, sending: Sending) -> None:
        """Write rank output in pieces that end at a line's end where one fits.

        Stopped while a piece was blocked: once that piece lands (the reader came back),
        a line it left open is ended, so that launcher messages start on their own line.
        """
        with self._lock:
            out = self._out
            fd = _fileno(out)
            if out is None or fd is None:
                self._out = _write(out, sending.data)
                self._stuck = False
                return
            data, sent = sending.data, 0
            try:
                out.flush()  # whatever went through the buffer goes first
                while sent < len(data):
                    end = _piece_end(data, sent)
                    count = os.write(fd, data[sent:end])
                    sent += count
                    if not sending.went(count):
                        if data[sent - 1 : sent] != b"\n":
                            os.write(fd, b"\n")
                        return
            except (OSError, ValueError):
                self._out = None
            self._stuck = False

    # --- launcher messages ----------------------------------------------------

    def _to_log(self, plain: str) -> None:
        with self._log_lock:
            if self._log_fd is not None:
                try:
                    os.write(self._log_fd, plain.encode("utf-8", "replace"))
                except OSError:
                    self._log_fd = None

    def _tell(self, data: bytes) -> None:
        """Write now if that cannot block, else queue behind what is queued already."""
        with self._says:
            if not self._queued:
                data = self._write_now(data)
                if not data:
                    return
            if len(self._queued) >= BACKLOG:
                self._unsaid += 1
                return
            self._queued.append(data)
            if self._messenger is None:
                self._messenger = threading.Thread(
                    target=self._write_queued, name="safelaunch-messages", daemon=True
                )
                _messengers.append(self._messenger)
                self._messenger.start()

    def _write_now(self, data: bytes) -> bytes:
        """Write what the terminal takes without waiting; return the rest."""
        if not self._lock.acquire(blocking=False):  # rank output is being written
            return data
        try:
            err = self._err
            fd = _fileno(err)
            if err is None or fd is None:
                self._err = _write(err, data)
                return b""
            err.flush()
            while data and _writable(fd):
                data = data[os.write(fd, data[:PIECE]) :]
            return data
        except (OSError, ValueError):
            self._err = None
            return b""
        finally:
            self._lock.release()

    def _write_queued(self) -> None:
        """The messenger: write queued messages in order, waiting for the terminal."""
        try:
            while True:
                with self._says:
                    if not self._queued:
                        self._messenger = None
                        return
                    data = self._queued[0]
                # Rank output stuck on a blocked stdout holds the lock: go round it rather
                # than wait (only a stuck console can then see a message inside its lines).
                locked = self._lock.acquire(timeout=0 if self._stuck else LOCK_WAIT)
                self._stuck = not locked  # wait once, not once per message
                try:
                    self._err = _write(self._err, data)
                finally:
                    if locked:
                        self._lock.release()
                with self._says:
                    self._queued.popleft()
                    if not self._queued and self._unsaid:
                        self._queued.append(_unsaid_line(self._unsaid))
                        self._unsaid = 0
        finally:
            _messengers.remove(threading.current_thread())


def _unsaid_line(count: int) -> bytes:
    return (
        f"safelaunch: warning: the console fell behind: {count} launcher message(s) "
        "not shown here; launcher.log has them\n"
    ).encode()


def buffer_of(stream: TextIO | None) -> BinaryIO | None:
    """The binary stream under sys.stdout/sys.stderr; None when started with it closed."""
    return getattr(stream, "buffer", None)


def _fileno(stream: BinaryIO | None) -> int | None:
    if stream is None:
        return None
    try:
        return stream.fileno()
    except (OSError, ValueError, AttributeError):
        return None


def _writable(fd: int) -> bool:
    """True if a write of PIECE bytes would not block (a pipe with room, a file, a TTY)."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(event & select.POLLOUT for _fd, event in poller.poll(0))


def _piece_end(data: bytes, start: int) -> int:
    """Where the piece from `start` ends: after the last newline within PIECE bytes."""
    limit = start + PIECE
    if limit >= len(data):
        return len(data)
    cut = data.rfind(b"\n", start, limit)
    return cut + 1 if cut >= 0 else limit


def _write(stream: BinaryIO | None, data: bytes) -> BinaryIO | None:
    """Write and flush; return None once the stream is unusable.

    A real file descriptor is written with os.write, past Python's buffer: a thread
    blocked on a full pipe then holds no lock of the interpreter's, which would make
    exiting with it still blocked a fatal error instead of the job's exit code.
    """
    if stream is None:
        return None
    fd = _fileno(stream)
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
