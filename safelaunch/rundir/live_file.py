"""Live state: `<attempt>/live/node<k>.json` and `<attempt>/live/history-node<k>.json`.

The supervisor of each node replaces its snapshot every second or two (and copies of the
other nodes' ones, shared through the store) and writes the history once at the end
(supervisor/live.py); `safelaunch status` (status/find.py) reads the snapshots and
report.html's timeline (view/lanes.py) the histories. docs/status.md has the format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DIRECTORY = "live"
SCHEMA = "safelaunch.live/1"
HISTORY_SCHEMA = "safelaunch.history/1"
SNAPSHOT_PREFIX = "node"
HISTORY_PREFIX = "history-node"
MAX_SNAPSHOT = 8 << 20  # bytes: a larger file is not one safelaunch wrote


def directory(attempt_dir: Path) -> Path:
    return attempt_dir / DIRECTORY


def snapshot(attempt_dir: Path, node: int) -> Path:
    return directory(attempt_dir) / f"{SNAPSHOT_PREFIX}{node}.json"


def history(attempt_dir: Path, node: int) -> Path:
    return directory(attempt_dir) / f"{HISTORY_PREFIX}{node}.json"


def has_live_state(attempt_dir: Path) -> bool:
    return directory(attempt_dir).is_dir()


def is_snapshot(path: Path) -> bool:
    return path.name.startswith(SNAPSHOT_PREFIX) and path.suffix == ".json"


def snapshot_files(attempt_dir: Path) -> list[Path]:
    """Every node's snapshot file in the attempt, sorted by name; none when unreadable."""
    try:
        return sorted(p for p in directory(attempt_dir).iterdir() if is_snapshot(p))
    except OSError:
        return []


def history_files(attempt_dir: Path) -> list[Path]:
    try:
        return sorted(directory(attempt_dir).glob(f"{HISTORY_PREFIX}*.json"))
    except OSError:
        return []


def read_snapshot(path: Path) -> dict[str, Any] | None:
    """One snapshot as written; None when too large, being replaced, or not ours.

    PermissionError is raised: who may see a run's state is for the caller to say.
    """
    try:
        if path.stat().st_size > MAX_SNAPSHOT:
            return None
        record = json.loads(path.read_bytes())
    except PermissionError:
        raise
    except (OSError, ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("ranks"), list) else None


def read_history(attempt_dir: Path) -> dict[str, Any]:
    """This node's history of the attempt (one per node); {} when there is none readable."""
    for path in history_files(attempt_dir):
        try:
            if path.stat().st_size > MAX_SNAPSHOT:
                continue
            record = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            return record
    return {}
