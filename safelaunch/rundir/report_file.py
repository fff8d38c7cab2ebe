"""The attempt's verdict and the run's views.

- `<attempt>/report.json`: every attempt's and rerun's verdict (report.py writes it,
  docs/report-json.md and docs/report.schema.json give its format); explain, the
  timeline and the next session read it back.
- `<run>/report.html` and `<run>/timeline.json`: the run's timeline (safelaunch.view).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPORT = "report.json"
PAGE = "report.html"
TIMELINE = "timeline.json"
MAX_REPORT = 16 << 20  # bytes: a few KiB per rank; a larger file is not one safelaunch wrote


def report(attempt_dir: Path) -> Path:
    return attempt_dir / REPORT


def page(run_dir: Path) -> Path:
    return run_dir / PAGE


def timeline(run_dir: Path) -> Path:
    return run_dir / TIMELINE


def read_report(attempt_dir: Path) -> dict[str, Any] | None:
    """The attempt's report.json; None when absent, too large, malformed or not an object."""
    try:
        path = report(attempt_dir)
        if path.stat().st_size > MAX_REPORT:
            return None
        record = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None
