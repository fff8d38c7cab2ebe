"""The process tree a job leaves behind: finding it, signalling it, reaping it.

Linux only: prctl(2) and /proc are the mechanisms.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from safelaunch.plan import TOKEN_VAR
from safelaunch.proctree import TreeScan, reach

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> bool:
    """Make orphaned descendants reparent to us instead of init, so the sweep finds them."""
    return bool(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def die_with(parent_pid: int) -> Callable[[], None]:
    """A preexec hook: the rank gets SIGKILL if the launcher dies, even by SIGKILL.

    Runs between fork and exec; ranks are spawned before any launcher thread
    starts, so no lock can be held in the child.
    """

    def hook() -> None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the launcher died before prctl took effect
            os._exit(1)

    return hook


def _read(path: str) -> bytes:
    """A /proc file's bytes (OSError when the process is gone): plain open, not pathlib,
    because a sweep reads two files of every process on the machine."""
    with open(path, "rb") as file:
        return file.read()


def _stat(pid: int) -> tuple[bytes, int] | None:
    """(state letter, parent pid) from /proc/PID/stat; None when the process is gone."""
    try:
        stat = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split(b" ", 2)  # comm may contain anything
    return fields[0], int(fields[1])


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """What identifies a process for good: its session and its start time (pids are reused)."""

    session: int
    started: int


def identity(pid: int) -> tuple[int, ProcessIdentity] | None:
    """(parent pid, ProcessIdentity) of a live process; None when gone or a zombie."""
    try:
        stat = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split(b" ")
    if fields[0] == b"Z":
        return None
    return int(fields[1]), ProcessIdentity(session=int(fields[3]), started=int(fields[19]))


def still(pid: int, seen: ProcessIdentity) -> bool:
    """True while the process recorded as `seen` runs (not a new one with its pid)."""
    found = identity(pid)
    return found is not None and found[1] == seen


def descendants(root: int) -> dict[int, ProcessIdentity]:
    """Every live descendant of `root` now, by parent chain: whatever its environment or
    session (a process that ran `env -i` or setsid is still below us while we live)."""
    tree = TreeScan(identity).scan([root], 0.0)
    return {pid: seen for pid, (_, seen) in tree.items() if pid != root}


def left_behind(recorded: dict[int, ProcessIdentity], sessions: set[int]) -> set[int]:
    """Live processes recorded while the launcher lived (same start time: not a reused pid),
    anything in a session one of them led, and their descendants now."""
    tree: dict[int, tuple[int, ProcessIdentity]] = {}
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        now = identity(pid)
        if now is None or pid == os.getpid():
            continue
        tree[pid] = now
        if recorded.get(pid) == now[1] or now[1].session in sessions:
            found.add(pid)
    return found.union(reach(tree, found))


def job_processes(token: str, *, below: int | None, exclude: Iterable[int] = ()) -> set[int]:
    """Live processes that belong to the run, found in one pass over /proc.

    That is every descendant of `below` (orphans included, since the launcher is
    a subreaper) and every process whose environment carries the run's token,
    whatever its parent or session.
    """
    needle = f"{TOKEN_VAR}={token}".encode()
    skip = set(exclude) | {os.getpid()}
    tree: dict[int, tuple[int, None]] = {}
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        stat = _stat(pid)
        if stat is None or stat[0] == b"Z" or pid in skip:
            continue
        tree[pid] = (stat[1], None)
        with contextlib.suppress(OSError):  # gone, or not ours to read
            if needle in _read(f"/proc/{name}/environ").split(b"\0"):
                found.add(pid)
    return found.union(reach(tree, [below])) if below is not None else found


def process_state(pid: int) -> str:
    """The /proc state letter (R, S, D, T for stopped, Z), or `gone`."""
    stat = _stat(pid)
    return stat[0].decode() if stat is not None else "gone"


def is_alive(pid: int) -> bool:
    """True for a process that exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] != b"Z"


def signal_group(pgid: int, sig: int) -> None:
    """Signal a whole process group; gone or foreign groups are fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def signal_pids(pids: Iterable[int], sig: int) -> None:
    """Signal each process; ones that are gone are fine."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def reap_strays(keep: Iterable[int]) -> None:
    """Collect exit statuses of children that are not ranks (orphans handed to us)."""
    kept = set(keep)
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid in kept:
            return  # nothing waiting, or a rank whose own waiter will collect it
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info.si_pid, 0)
