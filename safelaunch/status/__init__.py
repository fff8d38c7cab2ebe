"""`safelaunch status [RUN]`: what every rank of a running job is doing, from any shell.

Read-only: it reads the files the launchers keep in the run directory (never the store,
never torch) and measures this host's ranks with psutil / NVML. The one exception is
`--stacks`, which asks each rank for a live thread dump (see stacks.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from safelaunch.status.find import current_attempt, read_snapshots, resolve_run
from safelaunch.status.model import JobState, JobStatus, judge
from safelaunch.status.render import as_json, table
from safelaunch.vocab import NodeSnapshotState, RankSnapshotState


def _host() -> str:
    """socket.gethostname(), which the launcher writes, without the socket module (~2 ms):
    on Linux both are the kernel's node name."""
    return os.uname().nodename


def snapshot(where: str | None, log_dir: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The attempt directory being shown, and every node's snapshot in it."""
    attempt = current_attempt(resolve_run(where, log_dir))
    return attempt, read_snapshots(attempt)


def status_now(attempt: Path, snapshots: list[dict[str, Any]]) -> JobStatus:
    """Judge the snapshots now, with this host's ranks measured."""
    from safelaunch.status.measure import measure  # psutil: only when status runs

    host = _host()
    local = [
        (record["pid"], record.get("spawned_at"))
        for node in snapshots
        if node.get("host") == host and node.get("state") == NodeSnapshotState.RUNNING
        for record in node.get("ranks", [])
        if isinstance(record, dict)
        and isinstance(record.get("pid"), int)
        and record.get("state") == RankSnapshotState.RUNNING
    ]
    return judge(snapshots, time.time(), measure(local))


def show(
    where: str | None,
    log_dir: Path,
    *,
    as_json_output: bool,
    colour: bool,
    stacks: bool,
) -> str:
    """One look at the job, as text or JSON; with the ranks' live stacks when asked."""
    attempt, snapshots = snapshot(where, log_dir)
    status = status_now(attempt, snapshots)
    text = as_json(status, attempt) if as_json_output else table(status, attempt, colour)
    if stacks:
        from safelaunch.hangs.live_dump import dump_stacks

        text += "\n\n" + dump_stacks(snapshots, _host())
    return text


def watch(
    where: str | None,
    log_dir: Path,
    *,
    interval: float,
    in_place: bool,
    colour: bool,
    as_json_output: bool,
    emit: Callable[[str], None],
) -> None:
    """Refresh until the job ends (or Ctrl-C): in place on a terminal; else one table
    (or one JSON line) per look."""
    while True:
        attempt, snapshots = snapshot(where, log_dir)
        status = status_now(attempt, snapshots)
        if as_json_output:
            emit(as_json(status, attempt) + "\n")
        elif in_place:
            emit("\x1b[H\x1b[2J" + table(status, attempt, colour) + "\n")
        else:
            emit(table(status, attempt, colour) + "\n\n")
        if status.state != JobState.RUNNING:
            return
        time.sleep(interval)
