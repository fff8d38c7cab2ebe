"""Reading logs with bounds: only regular files, only their ends, never a link out of the tree.

A log can be 1 GB of NCCL INFO lines, a FIFO (opening one for reading blocks until a
writer comes), a device (/dev/zero never ends) or a link to someone else's file; a log
tree can be deep or loop. Diagnosis reads the end of a log, where errors are, and a
combined log's head (to see the order in which ranks first spoke) and tail.
"""

from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

LOG_TAIL = 1 << 20  # tracebacks are at the end; a huge log is not read whole
COMBINED_HEAD = 1 << 20  # a combined log: where each rank first spoke
COMBINED_TAIL = 16 << 20  # ... and how every rank ended (a few MiB per rank)
# Between a huge combined log's head and tail: what follows the first tracebacks found
# there (a rank that failed early while the others went on printing), never more in all.
TRACEBACK_MARK = b"Traceback (most recent call last):"
MIDDLE_WINDOW = 256 << 10
MIDDLE_KEEP = 16 << 20
SCAN_CHUNK = 8 << 20
WALK_DEPTH = 8  # directory levels below the path `explain` was given
WALK_ENTRIES = 20000  # directory entries looked at, in all


def _open_regular(path: Path) -> int | None:
    """A read descriptor for a regular file; None for anything else (FIFO, device, missing)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _read_at(fd: int, offset: int, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = os.pread(fd, min(left, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_tail(path: Path, limit: int = LOG_TAIL) -> str:
    """The last `limit` bytes of a regular file, decoded; empty when unreadable or not a file."""
    fd = _open_regular(path)
    if fd is None:
        return ""
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - limit)
        return _read_at(fd, start, size - start).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _whole_lines(head: bytes, tail: bytes, middle: tuple[bytes, ...] = ()) -> bytes:
    """Head up to its last line break, tail from its first: no line cut in two."""
    head = head[: head.rfind(b"\n") + 1]
    kept = b"".join(part + b"[...]\n" for part in middle)
    return head + b"[...]\n" + kept + tail[tail.find(b"\n") + 1 :]


def _middle_tracebacks(fd: int, start: int, end: int) -> tuple[bytes, ...]:
    """Whole lines from just before each traceback between `start` and `end`; bounded.

    A scan in chunks read into one buffer (bytes.find: about a second a GB; a fresh 8 MiB
    object per chunk cost as much again in page faults and copies), so memory stays a
    chunk's.
    """
    windows: list[bytes] = []
    offset, kept = start, 0
    buffer = bytearray(SCAN_CHUNK)
    while offset < end and kept < MIDDLE_KEEP:
        size = _read_into(fd, buffer, offset, min(SCAN_CHUNK, end - offset))
        at = buffer.find(TRACEBACK_MARK, 0, size)
        if at < 0:
            if size <= len(TRACEBACK_MARK):
                break
            offset += size - len(TRACEBACK_MARK)  # a mark cut by the chunk's end
            continue
        begin = max(start, offset + at - MIDDLE_WINDOW // 8)  # the prefix, lines before
        window = _read_at(fd, begin, min(MIDDLE_WINDOW, end - begin))
        windows.append(window[window.find(b"\n") + 1 : window.rfind(b"\n") + 1])
        kept += len(window)
        offset = begin + len(window)
    return tuple(windows)


def _read_into(fd: int, buffer: bytearray, offset: int, size: int) -> int:
    """Up to `size` bytes at `offset` into `buffer`: how many (fewer at the file's end)."""
    view, done = memoryview(buffer), 0
    while done < size:
        got = os.preadv(fd, [view[done:size]], offset + done)
        if not got:
            break
        done += got
    return done


def read_combined(path: Path) -> str | None:
    """A combined log's head, its tail and what follows tracebacks between (all of it when
    small); None when not a regular file."""
    fd = _open_regular(path)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        if size <= COMBINED_HEAD + COMBINED_TAIL:
            data = _read_at(fd, 0, size)
        else:
            head = _read_at(fd, 0, COMBINED_HEAD)
            tail = _read_at(fd, size - COMBINED_TAIL, COMBINED_TAIL)
            middle = _middle_tracebacks(fd, COMBINED_HEAD, size - COMBINED_TAIL)
            data = _whole_lines(head, tail, middle)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")


def read_stream(stream: BinaryIO) -> str:
    """A combined log on a pipe: its head and a rolling tail, never more in memory."""
    head = stream.read(COMBINED_HEAD)
    tail = b""
    while chunk := stream.read(4 << 20):
        tail = (tail + chunk)[-COMBINED_TAIL:]
    data = _whole_lines(head, tail) if tail else head
    return data.decode("utf-8", "replace")


def inside(root: Path, path: Path) -> bool:
    """True when `path`, links resolved, is within `root` (links resolved too)."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


def walk(root: Path, depth: int = WALK_DEPTH) -> Iterator[Path]:
    """Every path below `root`, breadth first by name, links not followed, depth and count
    bounded (a deep tree, a link loop or a directory of millions of entries stays cheap)."""
    level, seen = [root], 0
    for _ in range(depth):
        below = []
        for directory in level:
            try:
                with os.scandir(directory) as found:
                    entries = list(itertools.islice(found, WALK_ENTRIES - seen + 1))
            except OSError:
                continue
            for entry in sorted(entries, key=lambda e: e.name):
                seen += 1
                if seen > WALK_ENTRIES:
                    return
                yield Path(entry.path)
                if entry.is_dir(follow_symlinks=False):
                    below.append(Path(entry.path))
        level = below
