"""`status --stacks`: every local rank's threads, dumped live by faulthandler.

The rank's bootstrap registered faulthandler on the dump signal (safelaunch/rank/
bootstrap.py): it writes every thread's stack to the rank's stacks file in the private
directory and the rank runs on, unstopped. The one signal status ever sends, and only:
- to a pid whose environment names that very stacks file (a reused pid is left alone);
- to a rank that has written a heartbeat record (faulthandler is registered before the
  heartbeat starts, so the signal's default action, ending the process, cannot happen);
- as the job's owner: reading that environment and the private directory needs it.
The dump is then cut from the stacks file again, and the flight record the same signal
makes the rank write is put back as it was, so a later diagnosis reads only its own.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from stat import S_ISDIR
from typing import Any

from safelaunch.rank import names
from safelaunch.rundir import flight_file, stack_files
from safelaunch.supervisor.procs import process_state
from safelaunch.vocab import NodeSnapshotState, RankSnapshotState

DUMP_WAIT = 3.0  # s: faulthandler answers in about a millisecond; a busy host is slower
SETTLE = 0.1  # s without growth: the dump is complete
FLIGHT_WAIT = 0.5  # s for the rank's flight record, written by the same signal (flight.py)


def _rank_environ(pid: int, stacks_file: Path) -> dict[str, str] | None:
    """The pid's environment when it is a rank writing to `stacks_file`, inside a private
    directory of its owner; else None.

    A snapshot is a file in the run directory: checked, so that status run as root can
    never be steered into signalling, or cutting files of, anything but a rank.
    """
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
        private = os.lstat(stacks_file.parent)
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    environ = dict(
        item.decode("utf-8", "replace").partition("=")[::2] for item in raw if b"=" in item
    )
    if environ.get(names.STACKS_FILE) != str(stacks_file) or private.st_uid != owner:
        return None
    return environ if S_ISDIR(private.st_mode) and not private.st_mode & 0o077 else None


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _wait_for_dump(path: Path, before: int) -> None:
    deadline = time.monotonic() + DUMP_WAIT
    last, still_since = before, time.monotonic()
    while time.monotonic() < deadline:
        size = _size(path) or before
        if size != last:
            last, still_since = size, time.monotonic()
        elif size > before and time.monotonic() - still_since >= SETTLE:
            return
        time.sleep(0.02)


class _FlightRecord:
    """The rank's flight record, put back as it was after the dump signal rewrote it.

    The same signal makes the rank write torch's flight record (safelaunch/rank/flight_recorder.py)
    for a hang or failure diagnosis; one left by status would pass for the rank's state
    at the job's end.
    """

    def __init__(self, environ: Mapping[str, str], rank: object) -> None:
        directory = environ.get(names.FLIGHT_DIR)
        self.path = Path(directory) / flight_file.name(str(rank)) if directory else None
        self.before = self._read()
        self.stamp = self._stamp()

    def _read(self) -> bytes | None:
        try:
            return self.path.read_bytes() if self.path is not None else None
        except OSError:
            return None

    def _stamp(self) -> int | None:
        try:
            return self.path.stat().st_mtime_ns if self.path is not None else None
        except OSError:
            return None

    def restore(self) -> None:
        if self.path is None:
            return
        deadline = time.monotonic() + FLIGHT_WAIT
        while self._stamp() == self.stamp and time.monotonic() < deadline:
            time.sleep(0.02)
        if self._stamp() == self.stamp:
            return  # nothing written (torch.distributed not started, or not armed)
        with contextlib.suppress(OSError):
            if self.before is None:
                self.path.unlink()
            else:
                temporary = self.path.with_name(self.path.name + ".status")
                temporary.write_bytes(self.before)
                os.replace(temporary, self.path)


def dump_one(pid: int, stacks_file: Path, signum: int, rank: object = None) -> str:
    """One rank's dump, or why there is none."""
    environ = _rank_environ(pid, stacks_file)
    if environ is None:
        return "not dumped: its process is gone, or not yours (only the job's owner may ask)"
    # A stopped rank would answer only once resumed: into a later hang's dump.
    if process_state(pid) in ("T", "t"):
        return "not dumped: the process is stopped (SIGSTOP or a debugger)"
    before = _size(stacks_file)
    if before is None:
        return f"not dumped: cannot read {stacks_file} (only the job's owner may ask)"
    flight = _FlightRecord(environ, rank)
    try:
        os.kill(pid, signum)
    except OSError as exc:
        return f"not dumped: {exc.strerror}"
    _wait_for_dump(stacks_file, before)
    try:
        with open(stacks_file, "rb") as source:
            source.seek(before)
            text = source.read().decode("utf-8", "replace")
        os.truncate(stacks_file, before)  # the rank appends (O_APPEND): it writes on at the end
    except OSError as exc:
        return f"dump unreadable: {exc.strerror}"
    finally:
        flight.restore()
    return text.rstrip() or f"no dump within {DUMP_WAIT:g} s (the rank may be frozen)"


def dump_stacks(snapshots: Sequence[Mapping[str, Any]], host: str) -> str:
    """Every rank's live dump on this host; the other nodes' ranks are named, not asked."""
    out = []
    for node in snapshots:
        private = Path(str(node.get("private_dir", "")))
        signum = node.get("dump_signal")
        for record in node.get("ranks", []):
            rank, pid = record.get("rank"), record.get("pid")
            where = f"rank {rank} (node {node.get('node')}, pid {pid})"
            if node.get("host") != host:
                out.append(f"{where}: on {node.get('host')}: run safelaunch status --stacks there")
            elif (
                record.get("state") != RankSnapshotState.RUNNING
                or node.get("state") != NodeSnapshotState.RUNNING
            ):
                out.append(f"{where}: not running")
            elif not record.get("bootstrapped") or record.get("beat_at") is None:
                out.append(f"{where}: not dumped: no heartbeat yet, so no dump handler")
            elif not isinstance(pid, int) or not isinstance(signum, int):
                out.append(f"{where}: not dumped: the snapshot lacks its pid")
            else:
                text = dump_one(pid, stack_files.dump_file(private, str(rank)), signum, rank)
                out.append(f"{where}:\n{text}")
    return "\n\n".join(out)
