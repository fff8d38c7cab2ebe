"""Flight records: `<attempt>/flight/rank<N>.json`, and torch's own dumps beside them.

The rank writes torch's flight record (`_dump_fr_trace_json`) plus safelaunch's additions
(the groups Gloo leaves out, pending p2p, phases: key "safelaunch") when the dump signal
asks and when it raises (safelaunch/rank/flight_recorder.py). torch itself dumps a pickle per rank
to TORCH_FR_DUMP_TEMP_FILE (`<attempt>/flight-rank<N>` under --debug-profile default) on
an NCCL timeout. Read by the flight-record check (flights/check.py, flights/records.py) and
the diagnosis (flights/forensics.py).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

DIRECTORY = "flight"  # in the attempt directory
TORCH_DUMP_PREFIX = "flight-rank"  # TORCH_FR_DUMP_TEMP_FILE: torch appends the rank
TORCH_DUMP = "{attempt}/" + TORCH_DUMP_PREFIX  # --debug-profile default's value


def directory(attempt_dir: Path) -> Path:
    return attempt_dir / DIRECTORY


def name(rank: int | str) -> str:
    return f"rank{rank}.json"


def path(attempt_dir: Path, rank: int) -> Path:
    return directory(attempt_dir) / name(rank)


def write(flight_dir: str, rank: int, data: bytes) -> None:
    """The rank's side: replace its record with torch's JSON and ours."""
    os.makedirs(flight_dir, exist_ok=True)
    target = os.path.join(flight_dir, name(rank))
    with open(f"{target}.tmp", "wb") as out:
        out.write(data)
    os.replace(f"{target}.tmp", target)


def is_ours(path: Path) -> bool:
    """A record the rank wrote (not torch's pickle): `flight/rank<N>.json`."""
    return path.parent.name == DIRECTORY and path.suffix == ".json" and path.name.startswith("rank")


def record_files(attempt_dir: Path) -> list[Path]:
    """safelaunch's records and torch's own dumps (TORCH_FR_DUMP_TEMP_FILE<rank>)."""
    try:
        ours = sorted(directory(attempt_dir).glob("rank*.json"))
        torchs = sorted(p for p in attempt_dir.glob(f"{TORCH_DUMP_PREFIX}*") if p.suffix == "")
    except OSError:
        return []
    return ours + torchs


def read_ours(flight_dir: Path) -> dict[int, dict[str, object]]:
    """rank -> the record it wrote (safelaunch's JSON records only, not torch's pickles)."""
    import json  # the launcher's side only

    records: dict[int, dict[str, object]] = {}
    try:
        paths = sorted(flight_dir.glob("rank*.json"))
    except OSError:
        return records
    for path in paths:
        try:
            record = json.loads(path.read_bytes())
            records[int(record["safelaunch"]["rank"])] = record
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            continue
    return records
