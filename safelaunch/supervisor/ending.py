"""The attempt's last acts: end what the ranks left behind, or everything on a failure."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable

from safelaunch.supervisor.procs import (
    is_alive,
    job_processes,
    reap_strays,
    signal_group,
    signal_pids,
)
from safelaunch.supervisor.spawn import StartedRank

STRAY_GRACE = 2.0  # once every rank is gone, nothing is left to coordinate with


def find_strays(token: str, keeper: set[int]) -> set[int]:
    return job_processes(token, below=os.getpid(), exclude=keeper)


def sweep_strays(token: str, keeper: set[int], grace: float, deadline: float | None) -> int:
    """End what the ranks left behind: own sessions, SIGTERM-ignorers, daemons.

    `grace`: the shutdown timeout; `deadline`: the teardown's SIGKILL deadline, if any.
    """
    strays = find_strays(token, keeper)
    if not strays:
        return 0
    now = time.monotonic()
    end = now + min(STRAY_GRACE, grace)
    if deadline is not None:
        end = min(end, max(deadline, now))
    signal_pids(strays, signal.SIGTERM)
    seen = set(strays)
    while time.monotonic() < end and any(is_alive(pid) for pid in strays):
        time.sleep(0.05)
        reap_strays(keep=keeper)
    for _ in range(20):  # a dying process may still start another
        left = {pid for pid in strays if is_alive(pid)} | find_strays(token, keeper)
        if not left:
            break
        seen |= left
        signal_pids(left, signal.SIGKILL)
        time.sleep(0.02)
        reap_strays(keep=keeper)
        strays = left
    return len(seen)


def kill_everything(ranks: Iterable[StartedRank], token: str, keeper: set[int]) -> None:
    """The launcher itself failed: leave nothing running."""
    started = list(ranks)
    for rank in started:
        signal_group(rank.process.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        signal_pids(find_strays(token, keeper), signal.SIGKILL)
    for rank in started:
        with contextlib.suppress(Exception):
            rank.process.wait(timeout=5)
