"""Opening what a rank writes to: its log file, the filtered logs, its console prefix."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from safelaunch.plan import LaunchPlan, WorkerSpec
from safelaunch.rundir import rank_logs
from safelaunch.supervisor.lines import rank_label
from safelaunch.supervisor.tee import FilteredLog

_COLOURS = ("36", "32", "35", "34", "33", "96", "92", "95")


def open_rank_log(
    spec: WorkerSpec, on_error: Callable[[int, Path, OSError, int], None]
) -> int | None:
    """The rank's log, truncated; None (reported through `on_error`) if it cannot be."""
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW  # never through a link
        return os.open(spec.log_path, flags, 0o644)
    except OSError as exc:
        on_error(spec.rank, spec.log_path, exc, 0)
        return None


def filtered_logs(plan: LaunchPlan) -> dict[int, FilteredLog]:
    """Per stream, the log of the lines the console's duplicate filters held back."""
    filtered: dict[int, FilteredLog] = {}
    for stream, filters in plan.duplicate_filters.items():
        if filters:
            filtered[stream] = FilteredLog(
                rank_logs.filtered_log(plan.attempt_dir, stream), filters
            )
    return filtered


def rank_prefix(plan: LaunchPlan, rank: int) -> str:
    """The console prefix: labels padded to one width, colours cycled when enabled."""
    width = len(str(max(w.rank for w in plan.workers)))
    label = rank_label(rank, width, plan.node)
    if not plan.color:
        return label + " "
    return f"\x1b[{_COLOURS[rank % len(_COLOURS)]}m{label}\x1b[0m "
