"""The heartbeat record: `<private dir>/<attempt>/rank<N>.json`.

Replaced atomically by the rank's heartbeat thread every interval (safelaunch/rank/beat.py)
and once more as the rank exits; read by the supervisor (hang watch, live state), the
isolation rerun's time box and the diagnosis (collective counts). Format version 1.
"""

from __future__ import annotations

import os

from safelaunch.rundir.frozen import Record
from safelaunch.rundir.jsontext import write_atomically

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

VERSION = 1
Frame = tuple[str, int, str]  # file, line, function


class Beat(Record):
    """One rank's heartbeat record, as the rank wrote it."""

    rank: int
    time: float  # wall clock of the last sample
    since: float  # wall clock when stack, step or collective count last changed
    frames: tuple[Frame, ...]  # innermost first
    step: int | None
    seq: int | None
    spins: bool = False  # NCCL: a hung rank burns CPU, so its own CPU time is no progress
    cost: float = 0.0  # CPU seconds the heartbeat thread itself has used
    busy: bool = False  # the main thread computed since the previous record
    optimizer_steps: int | None = None  # torch.optim steps: the step when none is reported
    pid: int | None = None
    final: bool = False  # written as the rank exits: its script is done, no record follows


def name(rank: int | str) -> str:
    return f"rank{rank}.json"


def path(directory: Path, rank: int) -> Path:
    return directory / name(rank)


def write(
    path: str,
    *,
    since: float,
    now: float,
    frames: list[Frame],
    depth: int,
    step: int | None,
    seq: int | None,
    busy: bool,
    cost: float,
    spins: bool,
    optimizer_steps: int | None,
    final: bool = False,
) -> None:
    """The rank's side: replace its record (a reader sees the old one or the new one)."""
    write_atomically(
        path,
        {
            "version": VERSION,
            "pid": os.getpid(),
            "time": now,
            "since": since,
            "frames": frames,
            "depth": depth,
            "step": step,
            "seq": seq,
            "busy": busy,
            "cost": cost,
            "spins": spins,  # the launcher then ignores this process's own CPU time too
            "optimizer_steps": optimizer_steps,
            "final": final,
        },
    )


def read(rank: int, path: Path) -> Beat | None:
    """The rank's current record; None when absent, being replaced or malformed."""
    import json  # the launcher's side only: a rank never reads records

    try:
        record = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return from_record(rank, record)


def _optional_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def from_record(rank: int, record: object) -> Beat | None:
    """A heartbeat record as the rank wrote it; None when malformed."""
    if not isinstance(record, dict):
        return None
    try:
        return Beat(
            rank=rank,
            time=float(record["time"]),
            since=float(record["since"]),
            frames=tuple((str(f), int(n), str(fn)) for f, n, fn in record["frames"]),
            step=_optional_int(record.get("step")),
            seq=_optional_int(record.get("seq")),
            spins=bool(record.get("spins", False)),
            cost=float(record.get("cost", 0.0)),
            busy=bool(record.get("busy", False)),
            optimizer_steps=_optional_int(record.get("optimizer_steps")),
            pid=_optional_int(record.get("pid")),
            final=record.get("final") is True,
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
