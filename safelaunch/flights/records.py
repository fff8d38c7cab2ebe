"""Reading the ranks' flight records: safelaunch's JSON records and torch's own dumps.

Part of the flight-record check that runs in a subprocess (flights/check.py); kept apart so
that each module holds one job (reading records here, comparing them there).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
from pathlib import Path
from typing import Any

_TORCH_DUMP = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)$")  # TORCH_FR_DUMP_TEMP_FILE + rank

Record = dict[str, Any]


def load(paths: list[Path]) -> dict[int, Record]:
    """rank -> record, from safelaunch's JSON records and torch's own (pickled) dumps.

    A directory stands for the files in it.
    """
    records: dict[int, Record] = {}
    files = [f for p in paths for f in (sorted(p.iterdir()) if p.is_dir() else [p])]
    for path in files:
        with contextlib.suppress(Exception):
            record = _read(path)
            if record is not None:
                records.setdefault(int(record["rank"]), record)
    return records


def _read(path: Path) -> Record | None:
    if path.suffix == ".json" and path.name.startswith("rank"):
        record: Record = json.loads(path.read_bytes())
        return with_ours(record) if "entries" in record else None
    match = _TORCH_DUMP.match(path.name)
    # torch's dumps are pickles: only the user's own files are unpickled (never another
    # user's file on a shared machine: unpickling runs code)
    if match is None or path.suffix or path.stat().st_uid != os.getuid():
        return None
    with path.open("rb") as dump:
        loaded = pickle.load(dump)
    if not isinstance(loaded, dict) or "entries" not in loaded:
        return None
    loaded["rank"] = int(match["rank"])
    return loaded


def with_ours(record: Record) -> Record:
    """safelaunch's additions (rank, the group table Gloo leaves empty) in torch's places."""
    ours = record.get("safelaunch") or {}
    if "rank" in ours:
        record["rank"] = ours["rank"]
    if ours.get("pg_config"):
        record["pg_config"] = ours["pg_config"]
    return record


def _op(entry: Record) -> str:
    return str(entry.get("profiling_name", "?")).split(":", 1)[-1]


def _tensor(entry: Record) -> str:
    sizes = entry.get("input_sizes") or []
    dtypes = entry.get("input_dtypes") or []
    parts = [
        f"{_dtype(dtypes[i] if i < len(dtypes) else '?')}[{', '.join(map(str, size))}]"
        for i, size in enumerate(sizes)
    ]
    return ", ".join(parts)


def _dtype(name: str) -> str:
    return {
        "Float": "float32",
        "Double": "float64",
        "Half": "float16",
        "BFloat16": "bfloat16",
        "Int": "int32",
        "Long": "int64",
        "Byte": "uint8",
        "Bool": "bool",
    }.get(name, name)


def call_text(entry: Record) -> str:
    """all_reduce(float32[1024])"""
    return f"{_op(entry)}({_tensor(entry)})"
