"""The backend record: `<attempt>/rank<N>.comm.json`.

Written by the rank's torch.distributed hooks (safelaunch/rank/dist_hooks.py) as it calls
init_process_group (before the call: init itself may be what fails, then after it with
the backend it got), when an isolation rerun swaps a group's backend, and when it builds
a DistributedDataParallel. Its existence says the rank reached torch.distributed. Read by
the isolation policy and verdicts (isolation/evidence.py) and the flight-record request.
"""

from __future__ import annotations

from safelaunch.rundir.frozen import Record
from safelaunch.rundir.jsontext import write_atomically
from safelaunch.rundir.layout import rank_files

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

SUFFIX = ".comm.json"


class CommRecord(Record):
    """What one rank asked init_process_group for, and what it got."""

    rank: int
    requested: str | None  # the backend argument (None: torch's default)
    used: str | None  # written once init returned: None means it never did
    swapped: bool  # an isolation rerun put Gloo in its place
    ddp: bool  # it built a DistributedDataParallel


def name(rank: int | str) -> str:
    return f"rank{rank}{SUFFIX}"


def path(attempt_dir: Path, rank: int) -> Path:
    return attempt_dir / name(rank)


def write(path: str, record: dict[str, object]) -> None:
    """The rank's side: {requested, used, swapped, groups: [[asked, used]...], ddp}."""
    write_atomically(path, record)


def read_all(attempt_dir: Path) -> dict[int, CommRecord]:
    """Every rank's record in the attempt, by rank; unreadable ones left out."""
    import json  # the launcher's side only

    found: dict[int, CommRecord] = {}
    for rank, path in rank_files(attempt_dir, SUFFIX):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(record, dict):
            continue
        requested, used = record.get("requested"), record.get("used")
        found[rank] = CommRecord(
            rank=rank,
            requested=None if requested is None else str(requested),
            used=None if used is None else str(used),
            swapped=bool(record.get("swapped")),
            ddp=bool(record.get("ddp")),
        )
    return found
