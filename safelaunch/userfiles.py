"""Reading a small file the user named (--config, --signatures, the GPU inventory): checked.

Each reader refuses, with one line, what would otherwise hang or raise far from the
cause: a path too long for the kernel, a FIFO or device (opened non-blocking and
refused, so a FIFO with no writer cannot stall the launch), a file too big to be a
configuration, text that is not UTF-8, nesting deeper than any real file needs
(tomllib and json recurse), NaN in JSON. Callers turn `BadFile` into their stage's error.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any

MAX_FILE_BYTES = 1 << 20  # a configuration, signature or inventory file is a few KiB
MAX_DEPTH = 16  # tables / arrays inside each other; real files need 3
PATH_MAX, NAME_MAX = 4096, 255  # Linux limits: longer paths fail with ENAMETOOLONG


class BadFile(ValueError):
    """A file that cannot be used; the message says why, without the path."""


def path_problem(path: str) -> str | None:
    """Why `path` cannot name a file at all (None when it can)."""
    if "\0" in path:
        return "contains a NUL byte"
    encoded = os.fsencode(path)
    if len(encoded) >= PATH_MAX:
        return f"is {len(encoded)} bytes long (the limit is {PATH_MAX - 1})"
    if any(len(part) > NAME_MAX for part in encoded.split(b"/")):
        return f"has a name longer than {NAME_MAX} bytes"
    return None


def read_small(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes."""
    problem = path_problem(path)
    if problem:
        raise BadFile(f"the path {problem}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise BadFile(exc.strerror or str(exc)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadFile("not a regular file")
        if info.st_size > limit:
            raise BadFile(f"{info.st_size} bytes, more than the {limit} a file like this needs")
        with os.fdopen(os.dup(fd), "rb") as stream:
            data = stream.read(limit + 1)
    except OSError as exc:
        raise BadFile(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise BadFile(f"more than the {limit} bytes a file like this needs")
    return data


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadFile(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deeply lists and dicts nest in `value` (stops counting past `limit`)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    deepest = 0
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > limit:
            break
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        stack.extend((child, level + 1) for child in children)
    return deepest


def _shallow(value: Any) -> Any:
    if depth(value) > MAX_DEPTH:
        raise BadFile(f"nested more than {MAX_DEPTH} levels deep")
    return value


def load_toml(path: str) -> dict[str, Any]:
    """A TOML document, read with the checks above."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - python 3.10
        import tomli as tomllib
    text = _text(read_small(path))
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadFile(f"not valid TOML ({exc})") from None
    except RecursionError:
        raise BadFile(f"nested more than {MAX_DEPTH} levels deep") from None
    return dict(_shallow(data))


def _no_constant(name: str) -> Any:
    raise BadFile(f"{name} is not a number here")


def load_json(path: str) -> Any:
    """A JSON document, read with the checks above (NaN and Infinity refused)."""
    text = _text(read_small(path))
    try:
        return _shallow(json.loads(text, parse_constant=_no_constant))
    except RecursionError:
        raise BadFile(f"nested more than {MAX_DEPTH} levels deep") from None
    except json.JSONDecodeError as exc:
        raise BadFile(f"not valid JSON ({exc})") from None
