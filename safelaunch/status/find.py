"""Finding a run's live state on disk: the run directory, its current attempt, the snapshots.

Files only: the launcher of each node writes its live snapshot (its own ranks, and copies
of every other node's), see safelaunch/rundir/live_file.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from safelaunch.errors import StatusError
from safelaunch.rundir import layout, live_file


def _has_attempts(path: Path) -> bool:
    return any(child.is_dir() and live_file.has_live_state(child) for child in _children(path))


def _children(path: Path) -> list[Path]:
    try:
        return sorted(path.iterdir())
    except OSError:
        return []


def resolve_run(where: str | None, log_dir: Path) -> Path:
    """The run (or attempt) directory: RUN as a path, as a run id under the log dir, or
    the latest run there."""
    if where is not None:
        for candidate in (Path(where), log_dir / where):
            if candidate.is_dir():
                return candidate.resolve()
        raise StatusError(f"no run {where!r}: not a directory, nor a run under {log_dir}")
    latest = layout.latest(log_dir)
    if latest.is_dir():
        return latest.resolve()
    runs = [child for child in _children(log_dir) if child.is_dir() and _has_attempts(child)]
    if not runs:
        raise StatusError(
            f"no run under {log_dir} (give the run directory, or --log-dir where the job logs)"
        )
    return runs[-1].resolve()  # run ids sort by start time


def current_attempt(run: Path) -> Path:
    """The attempt (or isolation rerun) whose live state was written last."""
    if live_file.has_live_state(run):
        return run
    newest: tuple[float, Path] | None = None
    for child in _children(run):
        for snapshot in live_file.snapshot_files(child):
            try:
                written = snapshot.stat().st_mtime
            except OSError:
                continue
            if newest is None or written > newest[0]:
                newest = (written, child)
    if newest is None:
        raise StatusError(
            f"{run} has no live state (a run from before safelaunch status, "
            "or one started with logs off)"
        )
    return newest[1]


def read_snapshots(attempt: Path) -> list[dict[str, Any]]:
    """Every node's snapshot in the attempt's live/ directory, by node; unreadable ones skipped."""
    found = []
    for path in live_file.snapshot_files(attempt):
        try:
            record = live_file.read_snapshot(path)
        except PermissionError:
            raise StatusError(
                f"cannot read {path}: permission denied (the run directory's permissions "
                "decide who may see its state)"
            ) from None
        if record is not None:  # else being replaced, or not ours
            found.append(record)
    if not found:
        raise StatusError(f"{live_file.directory(attempt)} holds no readable live state")
    return sorted(found, key=lambda r: _int(r.get("node")) or 0)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
