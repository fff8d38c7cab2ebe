"""Per-rank tee: one reader thread per rank, one writer thread for the console.

Each reader copies every byte of its rank's pipe(s) to the rank's file as it
arrives (unbuffered, so a launcher crash loses nothing already read) and hands
whole prefixed lines to the single console writer: lines from two ranks can
never mix (honcho's model).
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from safelaunch.console import Console, Level, Sending
from safelaunch.supervisor.lines import LineAssembler, format_lines

CHUNK = 64 * 1024
PARTIAL_AFTER = 1.0  # seconds an unterminated line waits before the console shows it
# After a wake-up, let a burst of small writes (print under -u writes the text and
# the newline separately) pile up into one read: a few large reads cost the
# launcher far less CPU, which the ranks need, than thousands of tiny ones.
COALESCE = 0.002
_STOP = b""
DRAIN_LIMIT = 64 * 1024 * 1024  # bytes read from a pipe still held open at the end
STUCK_AFTER = 2.0  # seconds a reader waits for a console that takes nothing

LogErrorHook = Callable[[int, Path, OSError, int], None]


class ConsoleWriter(threading.Thread):
    """The only thread that writes rank output to the terminal.

    Files come first: a reader waits for the console at most STUCK_AFTER seconds.
    A slow terminal still slows the ranks (as an inherited one would), but a blocked
    one (a pipe nobody reads, a suspended `less`) must not stop the readers: their
    pipes would fill, the ranks' last words (a traceback) would stay unread, and the
    diagnosis reads the files. Lines the console could not take are counted and said.
    """

    def __init__(self, console: Console) -> None:
        super().__init__(name="safelaunch-console", daemon=True)
        self._console = console
        # Bounded: the launcher does not grow without limit behind a slow terminal.
        self._queue: queue.Queue[bytes] = queue.Queue(maxsize=4096)
        self._stuck = threading.Event()  # set: readers no longer wait for the console
        self._skipped = 0  # lines not shown since the console last caught up
        self._skipped_lock = threading.Lock()
        self._sending: Sending | None = None  # the batch the console is taking (or was)
        self._given_up = False  # close() stopped waiting: write nothing more

    def put(self, data: bytes) -> None:
        """Queue whole, prefixed lines; skip them when the console is stuck."""
        try:
            if self._stuck.is_set():
                self._queue.put_nowait(data)
            else:
                self._queue.put(data, timeout=STUCK_AFTER)
        except queue.Full:
            self._stuck.set()
            with self._skipped_lock:
                self._skipped += data.count(b"\n")

    def run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while batch[-1] is not _STOP and len(batch) < 512:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            done = batch[-1] is _STOP
            sending = Sending(b"".join(batch))
            with self._skipped_lock:
                late = self._given_up  # taken just as close() gave up: not shown either
                if late:
                    self._skipped += sending.data.count(b"\n")
                self._sending = None if late else sending
            if not late:
                self._console.send(sending)
            with self._skipped_lock:
                self._sending = None
            if self._given_up:
                self._say_skipped()  # nothing unless taken late (close() said the rest)
                return
            if done or self._queue.empty():
                self._say_skipped()
            if done:
                return

    def _say_skipped(self) -> None:
        """One line each time the console catches up after falling behind."""
        with self._skipped_lock:
            skipped, self._skipped = self._skipped, 0
            self._stuck.clear()
        if skipped:
            self._console.say(
                f"the console fell behind: {skipped} line(s) of rank output not shown here; "
                "the rank logs have every byte",
                Level.WARNING,
            )

    def close(self, timeout: float) -> None:
        """Write what is queued, then stop; give up after `timeout` (a blocked console)."""
        self._stuck.set()
        until = time.monotonic() + timeout
        while self.is_alive() and time.monotonic() < until:
            try:
                self._queue.put(_STOP, timeout=0.1)
                break
            except queue.Full:
                continue
        self.join(max(0.0, until - time.monotonic()))
        if self.is_alive():  # it may never catch up: what it still holds is not shown
            with self._skipped_lock:
                self._given_up = True
                if self._sending is not None:  # the batch being written, from where it stands
                    self._skipped += self._sending.stop()
                with contextlib.suppress(queue.Empty):
                    while True:
                        self._skipped += self._queue.get_nowait().count(b"\n")
            self._say_skipped()


class FilteredLog:
    """attempt_N/filtered_std{out,err}.log: lines matching --duplicate-*-filters."""

    def __init__(self, path: Path, filters: tuple[str, ...]) -> None:
        self._needles = tuple(f.encode("utf-8") for f in filters)
        self._path = path
        self._lock = threading.Lock()
        self._fd: int | None = None

    def offer(self, prefix: str, lines: list[bytes]) -> None:
        """Append the lines that match a filter."""
        hits = [line for line in lines if any(n in line for n in self._needles)]
        if not hits:
            return
        data = b"".join(prefix.encode() + b" " + line + b"\n" for line in hits)
        with self._lock:
            try:
                if self._fd is None:
                    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                    self._fd = os.open(self._path, flags, 0o644)
                os.write(self._fd, data)
            except OSError:
                pass  # the rank's own log still has these lines

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class RankTee(threading.Thread):
    """Reads one rank's pipes until they close; file first, then console."""

    def __init__(
        self,
        *,
        rank: int,
        pipes: Mapping[int, int],
        log_fd: int | None,
        log_path: Path,
        prefix: str,
        shown_streams: int,
        writer: ConsoleWriter,
        filtered: Mapping[int, FilteredLog],
        on_log_error: LogErrorHook,
    ) -> None:
        super().__init__(name=f"safelaunch-tee-{rank}", daemon=True)
        self.rank = rank
        self._pipes = dict(pipes)  # fd -> stream (STD_ALL when both share a pipe)
        self._assemblers = {fd: LineAssembler() for fd in pipes}
        self._quiet_since: dict[int, float] = {}
        self._log_fd = log_fd
        self._log_path = log_path
        self._written = 0
        self._prefix = prefix
        self._plain_prefix = f"[rank{rank}]:"
        self._shown = shown_streams
        self._writer = writer
        self._filtered = filtered
        self._on_log_error = on_log_error
        self._stop_at: float | None = None
        self._behind = False  # the last read filled the buffer: read again at once
        self.last_output: float | None = None  # wall clock of the last byte read

    def stop_by(self, when: float) -> None:
        """Give up on pipes still open at `when` (held by a process we could not end)."""
        self._stop_at = when

    def run(self) -> None:
        poller = select.poll()
        for fd in self._pipes:
            poller.register(fd, select.POLLIN)
        try:
            while self._pipes:
                if self._stop_at is not None and time.monotonic() >= self._stop_at:
                    self._drain()
                    break
                ready = poller.poll(self._poll_timeout_ms())
                if ready and not self._behind:
                    time.sleep(COALESCE)
                for fd, _event in ready:
                    if not self._read(fd):
                        poller.unregister(fd)
                self._show_stale_partials()
        finally:
            for fd in list(self._pipes):
                self._finish_stream(fd)
            if self._log_fd is not None:
                os.close(self._log_fd)
                self._log_fd = None

    def _drain(self) -> None:
        """Before giving up on a pipe a stranger holds open: read what is in it now.

        Bounded (DRAIN_LIMIT per pipe): that stranger may never stop writing.
        """
        for fd in list(self._pipes):
            os.set_blocking(fd, False)  # empty now: EAGAIN ends the stream like EOF
            taken = 0
            while fd in self._pipes and taken < DRAIN_LIMIT:
                self._read(fd)
                taken += CHUNK

    def _poll_timeout_ms(self) -> int:
        """Block until data, except to show a stale partial line or to honour stop_by."""
        waits = []
        if self._quiet_since:
            waits.append(min(self._quiet_since.values()) + PARTIAL_AFTER - time.monotonic())
        if self._stop_at is not None:
            waits.append(0.2)
        return int(max(0.0, min(waits)) * 1000) + 1 if waits else -1

    def _read(self, fd: int) -> bool:
        """Copy one chunk; False once the pipe is closed."""
        try:
            data = os.read(fd, CHUNK)
        except OSError:
            data = b""
        if not data:
            self._finish_stream(fd)
            return False
        self._behind = len(data) == CHUNK
        self.last_output = time.time()
        self._store(data)
        assembler = self._assemblers[fd]
        lines = assembler.feed(data)
        if lines:
            self._route(self._pipes[fd], lines)
        if assembler.pending:
            self._quiet_since.setdefault(fd, time.monotonic())
        else:
            self._quiet_since.pop(fd, None)
        return True

    def _store(self, data: bytes) -> None:
        if self._log_fd is None:
            return
        view = memoryview(data)
        try:
            while view:
                count = os.write(self._log_fd, view)
                self._written += count
                view = view[count:]
        except OSError as exc:
            os.close(self._log_fd)
            self._log_fd = None
            self._on_log_error(self.rank, self._log_path, exc, self._written)

    def _route(self, stream: int, lines: list[bytes]) -> None:
        if stream & self._shown:
            self._writer.put(format_lines(lines, self._prefix, self.rank))
        if stream in self._filtered:  # a shared pipe (STD_ALL) is never filtered
            self._filtered[stream].offer(self._plain_prefix, lines)

    def _show_stale_partials(self) -> None:
        now = time.monotonic()
        for fd, since in list(self._quiet_since.items()):
            if now - since >= PARTIAL_AFTER:
                self._flush_partial(fd)

    def _flush_partial(self, fd: int, ended: bool = False) -> None:
        self._quiet_since.pop(fd, None)
        text = self._assemblers[fd].flush(ended)
        if text is not None:
            self._route(self._pipes[fd], [text])

    def _finish_stream(self, fd: int) -> None:
        if fd not in self._pipes:
            return
        self._flush_partial(fd, ended=True)
        del self._pipes[fd]
        os.close(fd)
