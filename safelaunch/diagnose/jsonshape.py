"""The shape of the JSON records explain reads, checked once where each is read.

A record on disk may be anything: truncated, another tool's file, edited by hand, nested
ten thousand levels deep. Its readers take the fields they use at their word (a list
here, a number there), so a record is checked against a declared shape before any of
them sees it: a record that does not fit is unreadable, said in one line, instead of a
TypeError far from the cause. A shape lists only the fields readers use; other fields
pass unchecked, and any field may be absent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safelaunch import exitcodes
from safelaunch.errors import SafelaunchError
from safelaunch.userfiles import BadFile, depth, read_small

MAX_RECORD_DEPTH = 16  # report.json nests 6 levels; json recurses per level
_NAMES = {
    bool: "true/false",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


class Unreadable(SafelaunchError):
    """A record explain needs that cannot be read or does not have its shape."""

    exit_code = exitcodes.USAGE


@dataclass(frozen=True, slots=True)
class Kind:
    """A JSON scalar of one of `types` (an int is not a bool; a float takes an int)."""

    types: tuple[type, ...]


@dataclass(frozen=True, slots=True)
class Obj:
    """An object whose listed fields, where present, have their shapes."""

    fields: Mapping[str, Shape]


@dataclass(frozen=True, slots=True)
class Arr:
    """A list whose every item has `item`'s shape."""

    item: Shape


@dataclass(frozen=True, slots=True)
class Map:
    """An object of any keys whose every value has `value`'s shape."""

    value: Shape


@dataclass(frozen=True, slots=True)
class Row:
    """A list of exactly these shapes, in order (a frame: file, line, function)."""

    items: tuple[Shape, ...]


Shape = Kind | Obj | Arr | Map | Row
NULL = type(None)
INT, NUM, STR = Kind((int,)), Kind((int, float)), Kind((str,))
OPT_INT, OPT_NUM, OPT_STR = Kind((int, NULL)), Kind((int, float, NULL)), Kind((str, NULL))


def _named(value: Any) -> str:
    return _NAMES.get(type(value), type(value).__name__)


def _fits(value: Any, kind: Kind) -> bool:
    if isinstance(value, bool):  # JSON's true is not the integer 1
        return bool in kind.types
    return isinstance(value, kind.types)


def mismatch(value: Any, shape: Shape, where: str = "") -> str | None:
    """Where and how `value` departs from `shape` (`ranks[2].rank is a string, not an
    integer`); None when it fits. Only the shape is walked, so a deep value costs no
    more than the shape's own depth."""
    here = where or "the record"
    if isinstance(shape, Kind):
        if _fits(value, shape):
            return None
        wanted = " or ".join(_NAMES.get(t, t.__name__) for t in shape.types)
        return f"{here} is {_named(value)}, not {wanted}"
    if value is None and not isinstance(shape, Row):
        return None  # an absent part (null): its readers see nothing there
    if isinstance(shape, Obj | Map):
        if not isinstance(value, dict):
            return f"{here} is {_named(value)}, not an object"
        if isinstance(shape, Map):
            parts = [(shape.value, v, _key(where, str(k))) for k, v in value.items()]
        else:
            named = shape.fields.items()
            parts = [(f, value[n], _key(where, n)) for n, f in named if n in value]
    else:
        if not isinstance(value, list):
            return f"{here} is {_named(value)}, not a list"
        if isinstance(shape, Row) and len(value) != len(shape.items):
            return f"{here} has {len(value)} items, not {len(shape.items)}"
        items = shape.items if isinstance(shape, Row) else [shape.item] * len(value)
        parts = [(s, v, f"{where}[{i}]") for i, (s, v) in enumerate(zip(items, value, strict=True))]
    return next((p for s, v, at in parts if (p := mismatch(v, s, at))), None)


def _key(where: str, name: str) -> str:
    shown = name if name.isprintable() and len(name) <= 40 else repr(name[:40])
    return f"{where}.{shown}" if where else shown


def _no_constant(name: str) -> float:
    return float(name)  # NaN / Infinity as json.dumps writes them: numbers


def read_record(path: Path, shape: Shape, limit: int) -> dict[str, Any] | None:
    """The JSON object at `path` checked against `shape`; None when there is no such file.

    Anything else that keeps it from being read (not a regular file, over `limit` bytes,
    not UTF-8 JSON, nested deeper than any record, another shape) is Unreadable."""
    if not os.path.lexists(path):
        return None

    def unreadable(why: str) -> Unreadable:
        return Unreadable(f"{path}: unreadable: {why}", "give a directory of intact records")

    try:
        text = read_small(str(path), limit).decode("utf-8")
        record = json.loads(text, parse_constant=_no_constant)
    except BadFile as exc:
        raise unreadable(str(exc)) from None
    except UnicodeDecodeError:
        raise unreadable("not UTF-8 text") from None
    except RecursionError:
        raise unreadable(f"nested more than {MAX_RECORD_DEPTH} levels deep") from None
    except json.JSONDecodeError as exc:
        raise unreadable(f"not valid JSON ({exc})") from None
    if depth(record, MAX_RECORD_DEPTH) > MAX_RECORD_DEPTH:
        raise unreadable(f"nested more than {MAX_RECORD_DEPTH} levels deep")
    if not isinstance(record, dict):
        raise unreadable(f"the record is {_named(record)}, not an object")
    problem = mismatch(record, shape)
    if problem is not None:
        raise unreadable(problem)
    return record
