"""Finding a run's live state on disk: the run directory, its current attempt, the snapshots.

Files only: the launcher of each node writes `<attempt>/live/node<k>.json` (its own ranks,
and copies of every other node's), see safelaunch/supervisor/live.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safelaunch.errors import StatusError

LIVE_DIR = "live"
MAX_SNAPSHOT = 8 << 20  # bytes: a larger file is not one safelaunch wrote


def _has_attempts(path: Path) -> bool:
    return any(child.is_dir() and (child / LIVE_DIR).is_dir() for child in _children(path))


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
    latest = log_dir / "latest"
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
    if (run / LIVE_DIR).is_dir():
        return run
    newest: tuple[float, Path] | None = None
    for child in _children(run):
        for snapshot in _children(child / LIVE_DIR):
            if not snapshot.name.startswith("node"):
                continue
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
    for path in _children(attempt / LIVE_DIR):
        if not (path.name.startswith("node") and path.suffix == ".json"):
            continue
        try:
            if path.stat().st_size > MAX_SNAPSHOT:
                continue
            record = json.loads(path.read_bytes())
        except PermissionError:
            raise StatusError(
                f"cannot read {path}: permission denied (the run directory's permissions "
                "decide who may see its state)"
            ) from None
        except (OSError, ValueError):
            continue  # being replaced, or not ours
        if isinstance(record, dict) and isinstance(record.get("ranks"), list):
            found.append(record)
    if not found:
        raise StatusError(f"{attempt / LIVE_DIR} holds no readable live state")
    return sorted(found, key=lambda r: _int(r.get("node")) or 0)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
