"""The run as pictures: report.html (for people) and timeline.json (Chrome trace events).

One entry point, called by the orchestrator when a run ends (every exit path that writes
a report.json): both files go next to the run's attempts, written with the same helper
as report.json. A view never changes the run's outcome: any failure here is swallowed.
"""

from __future__ import annotations

from pathlib import Path

from safelaunch.rundir import report_file
from safelaunch.rundir.writing import Writer
from safelaunch.view.lanes import read_timeline
from safelaunch.view.page import render
from safelaunch.view.trace import trace


def write_views(run_dir: Path, write: Writer) -> bool:
    """Write run_dir/report.html and run_dir/timeline.json; False when either failed."""
    try:
        timeline = read_timeline(run_dir)
    except OSError:
        return False
    if not timeline.attempts:
        return False
    page = write(report_file.page(run_dir), render(timeline))
    return write(report_file.timeline(run_dir), trace(timeline)) and page
