"""JSON text for the rank's own records, without importing the json module.

Every rank writes a heartbeat record before the user's code starts and one more as it
leaves, but `import json` also loads its decoder, and with it `re`: ~3 ms of each rank's
start in a plain install (bench/per_rank.py), for text the rank never parses. The records
hold only str, int, float, bool, None, lists, tuples and dicts; for those this gives the
text json.dumps gives (the same separators, NaN/Infinity, ASCII escapes from json's own C
escaper), and for anything else the same TypeError. tests/test_rank_json.py compares them.
"""

from __future__ import annotations

import os
from _json import encode_basestring_ascii as _string


def dumps(value: object) -> str:
    """`json.dumps(value)` for the types a rank record holds."""
    parts: list[str] = []
    _encode(value, parts)
    return "".join(parts)


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value == float("inf"):
        return "Infinity"
    if value == -float("inf"):
        return "-Infinity"
    return float.__repr__(value)


def _key(key: object) -> str:
    """A dict key as json.dumps writes it (it turns these scalars into strings)."""
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return _float(key)
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _encode(value: object, parts: list[str]) -> None:
    if isinstance(value, str):
        parts.append(_string(value))
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, int):
        parts.append(int.__repr__(value))
    elif isinstance(value, float):
        parts.append(_float(value))
    elif isinstance(value, (list, tuple)):
        parts.append("[")
        for index, item in enumerate(value):
            if index:
                parts.append(", ")
            _encode(item, parts)
        parts.append("]")
    elif isinstance(value, dict):
        parts.append("{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                parts.append(", ")
            parts.append(_string(_key(key)))
            parts.append(": ")
            _encode(item, parts)
        parts.append("}")
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def write_atomically(path: str, record: dict[str, object]) -> None:
    """Replace `path` with the JSON record: a reader sees the old one or the new one, whole."""
    temporary = f"{path}.tmp"
    with open(temporary, "w") as out:
        out.write(dumps(record))
    os.replace(temporary, path)
