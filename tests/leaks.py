"""Ending every process a test started, whatever it did to hide (used by conftest.py).

A process is the test's when its environment carries the test's mark, or when it sits in
a session or process group led by one that does (a descendant may clear its environment,
but it keeps its session unless it calls setsid itself: each rank leads its own), or in
the session of a launcher the test started (conftest starts each in a session of its own).
Out of reach: a descendant that cleared its environment once the rank leading its session
has exited (nothing marked names that session any more); ending those is the launcher's
own job (its keeper), which tests of the launcher check.

Run as a script it is the session's reaper: it waits on a pipe from pytest and, if pytest
dies without saying "done" (killed, or pytest-timeout's thread method, which ends the
process with os._exit and runs no teardown), sweeps every mark of the session.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

MARK_VAR = "SAFELAUNCH_TEST_MARK"
DONE = b"done"


def _ids(stat: bytes) -> tuple[bytes, int, int]:
    """(state letter, process group, session) from /proc/PID/stat; comm may hold anything."""
    fields = stat[stat.rfind(b")") + 2 :].split(b" ", 5)
    return fields[0], int(fields[2]), int(fields[3])


def scan(carries: Callable[[list[bytes]], bool]) -> dict[int, tuple[int, int, bool]]:
    """Every live process: pid -> (process group, session, whether `carries` its env)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, pgid, sid = _ids((entry / "stat").read_bytes())
        except (OSError, ValueError, IndexError):
            continue
        if state == b"Z":
            continue
        try:
            marked = carries((entry / "environ").read_bytes().split(b"\0"))
        except OSError:  # gone, or not ours to read
            marked = False
        found[int(entry.name)] = (pgid, sid, marked)
    return found


def exact(marks: Iterable[str]) -> Callable[[list[bytes]], bool]:
    needles = {f"{MARK_VAR}={mark}".encode() for mark in marks}
    return lambda environ: not needles.isdisjoint(environ)


def prefixed(prefix: str) -> Callable[[list[bytes]], bool]:
    needle = f"{MARK_VAR}={prefix}".encode()
    return lambda environ: any(item.startswith(needle) for item in environ)


def doomed(
    carries: Callable[[list[bytes]], bool], sessions: Iterable[int], spare: set[int]
) -> set[int]:
    """The marked processes and everything in a session or group that a marked process
    leads (a rank's, a launcher's), or in one of `sessions`.

    Only sessions and groups led by a marked process: a marked process in someone else's
    (a daemon's that started it) does not make that daemon the test's. Those in `spare`
    never: a marked process started without a session of its own shares pytest's.
    """
    procs = scan(carries)
    spare = spare | {0, 1}
    led = {pid for pid, (_, _, marked) in procs.items() if marked} - spare
    groups = {pgid for pgid, _, marked in procs.values() if marked} & led
    whole = ({sid for _, sid, marked in procs.values() if marked} & led) | (set(sessions) - spare)
    me = os.getpid()
    return {
        pid
        for pid, (pgid, sid, marked) in procs.items()
        if pid != me and (marked or pgid in groups or sid in whole)
    }


def sweep(
    carries: Callable[[list[bytes]], bool],
    sessions: Iterable[int] = (),
    spare: set[int] | None = None,
) -> set[int]:
    """SIGKILL the test's processes until none is left (a dying parent may still fork)."""
    spare = {os.getsid(0), os.getpgrp()} if spare is None else spare
    killed: set[int] = set()
    deadline = time.monotonic() + 5.0
    while (pids := doomed(carries, sessions, spare)) and time.monotonic() < deadline:
        # Freeze first so that none forks a child the next pass would have to chase.
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
        killed |= pids
        time.sleep(0.02)
    return killed


def start_reaper(prefix: str) -> int:
    """Start the session's reaper; returns the write end of its pipe (write DONE to it)."""
    import subprocess

    read_fd, write_fd = os.pipe()
    subprocess.Popen(
        [sys.executable, __file__, prefix, str(os.getsid(0)), str(os.getpgrp())],
        stdin=read_fd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the terminal's Ctrl-C is for pytest, not for the reaper
    )
    os.close(read_fd)
    return write_fd


def _reap(prefix: str, pytest_session: int, pytest_group: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        message = os.read(0, len(DONE))
    except OSError:
        message = b""
    if message != DONE:  # pytest died without its own sweep
        sweep(prefixed(prefix), spare={pytest_session, pytest_group, os.getsid(0)})


if __name__ == "__main__":
    _reap(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
