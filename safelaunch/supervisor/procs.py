"""The process tree a job leaves behind: finding it, signalling it, reaping it.

Linux only: prctl(2) and /proc are the mechanisms.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from safelaunch.plan import TOKEN_VAR

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> bool:
    """Make orphaned descendants reparent to us instead of init, so the sweep finds them."""
    return _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


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


def with_token(token: str, exclude: Iterable[int] = ()) -> set[int]:
    """Live processes whose environment carries this run's token (any parent, any session)."""
    needle = f"{TOKEN_VAR}={token}".encode()
    skip = set(exclude) | {os.getpid()}
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        if needle in environ.split(b"\0") and is_alive(int(entry.name)):
            found.add(int(entry.name))
    return found


def descendants(exclude: Iterable[int] = ()) -> set[int]:
    """Live processes below the launcher (orphans included, since we are a subreaper)."""
    skip = set(exclude)
    found = set()
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children(recursive=True):
            if child.pid not in skip and is_alive(child.pid):
                found.add(child.pid)
    return found


def is_alive(pid: int) -> bool:
    """True for a process that exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


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
