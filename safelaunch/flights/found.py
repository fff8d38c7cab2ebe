"""Flight records found below a log directory, for `safelaunch explain` (not a live run).

explain is handed a directory of any layout (a safelaunch run, a torchrun run, torch's own
dumps): this finds the records of the job's last attempt there, bounded and without
following links, and compares them as the live summary does (forensics.examine).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from safelaunch.diagnose.reading import inside, walk
from safelaunch.flights.forensics import Forensics, examine, lines
from safelaunch.ranktext import ranks_label
from safelaunch.rundir import flight_file, layout

_TORCH_DUMP = re.compile(r"rank_?\d+$")  # TORCH_FR_DUMP_TEMP_FILE's default: nccl_trace_rank_<N>
SEARCH_LIMIT = 10_000  # directory entries looked at by explain


def records_under(directory: Path) -> list[Path]:
    """Flight records anywhere below a log directory (explain): ours and torch's own dumps.

    Those of the job's last attempt (attempt_N, the highest N), as the live summary reads
    them; an isolation rerun's (isolate_*) only where no attempt left any. Elsewhere (a
    torchrun run, torch's own dumps) the newest directory's.
    """
    found: dict[Path, list[Path]] = {}
    for seen, path in enumerate(walk(directory)):  # bounded, links not followed
        if seen >= SEARCH_LIMIT:
            break
        ours = flight_file.is_ours(path)
        torchs = not path.suffix and _TORCH_DUMP.search(path.name) is not None
        if (ours or torchs) and os.path.isfile(path) and inside(directory, path):
            attempt = path.parent.parent if ours else path.parent
            found.setdefault(attempt, []).append(path)
    if not found:
        return []
    chosen = max(found, key=lambda a: (_attempt_number(a), max(_mtime(p) for p in found[a])))
    return sorted(found[chosen])


def _attempt_number(directory: Path) -> int:
    """N for the job's attempt_N; -1 for anything else (an isolation rerun: isolate_gloo)."""
    number = layout.attempt_number(directory.name)
    return -1 if number is None else number


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def found_under(where: Path) -> tuple[Forensics | None, int]:
    """The flight records found below `where`, compared; and how many files there were."""
    latest = layout.latest(where)  # a log directory: its latest run, as explain reads its logs
    # os.path: False, not an OSError, for a path past the system's limit (a deep PATH)
    if os.path.isdir(latest) and inside(where, latest):
        where = latest.resolve()
    files = records_under(where) if os.path.isdir(where) else []
    return (examine(files, {}, files[0].parent) if files else None), len(files)


def explain_lines(forensics: Forensics | None, files: int) -> list[str]:
    """explain's section on the flight records found below the path it was given."""
    if forensics is None:
        return []
    return [
        f"flight records: {files} file(s) in {forensics.directory} "
        f"({ranks_label(forensics.recorded)})",
        *(f"  collectives: {line}" for line in lines(forensics)),
    ]
