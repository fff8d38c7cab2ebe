"""The user's own failure signatures (--signatures FILE): read, checked field by field.

They come first in the table, so they win over the built-in ones (signatures.py).
"""

from __future__ import annotations

from typing import Any

from safelaunch.diagnose.match import PATTERN_ERROR, compile_pattern
from safelaunch.diagnose.signatures import SIGNATURES, Signature
from safelaunch.errors import ConfigError
from safelaunch.userfiles import BadFile, load_toml
from safelaunch.vocab import UNKNOWN, failure_class

MAX_USER_PATTERN = 1000  # characters; a signature is a phrase, not a program
_RECORD_KEYS = {
    "id",
    "class",
    "patterns",
    "meaning",
    "next_steps",
    "isolation_helps",
    "consequence",
}


def _strings(record: dict[str, Any], key: str) -> tuple[str, ...]:
    value = record.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TypeError(f"{key} must be a list of strings")
    return tuple(value)


def _text(record: dict[str, Any], key: str, default: str | None = None) -> str:
    value = record.get(key, default)
    if value is None:
        raise KeyError(key)
    if not isinstance(value, str):
        raise TypeError(f"{key} must be a string")
    return value


def _flag(record: dict[str, Any], key: str) -> bool:
    value = record.get(key, False)
    if not isinstance(value, bool):
        raise TypeError(f"{key} must be true or false")
    return value


def _check_pattern(pattern: str) -> None:
    if len(pattern) > MAX_USER_PATTERN:
        raise TypeError(f"a pattern is {len(pattern)} characters long (at most {MAX_USER_PATTERN})")
    try:
        compile_pattern(pattern)
    except PATTERN_ERROR as exc:
        why = (
            exc.args[0].decode(errors="replace")
            if exc.args and isinstance(exc.args[0], bytes)
            else exc
        )
        raise TypeError(
            f"pattern {pattern[:60]!r} is not an RE2 regular expression ({why}); "
            "lookaround and backreferences are not supported"
        ) from None


def from_records(records: list[Any], source: str) -> tuple[Signature, ...]:
    """User signatures (e.g. `[[signature]]` tables of a TOML file), checked field by field."""
    signatures = []
    for number, record in enumerate(records, 1):
        where = f"{source}: signature {number}"
        try:
            if not isinstance(record, dict):
                raise TypeError("is not a table ([[signature]])")
            unknown = sorted(set(record) - _RECORD_KEYS)
            if unknown:
                raise TypeError(f"unknown key {unknown[0]!r}")
            patterns = _strings(record, "patterns")
            for pattern in patterns:
                _check_pattern(pattern)
            signature = Signature(
                id=_text(record, "id"),
                patterns=patterns,
                meaning=_text(record, "meaning"),
                next_steps=_strings(record, "next_steps"),
                isolation_helps=_flag(record, "isolation_helps"),
                consequence=_flag(record, "consequence"),
                klass=failure_class(_text(record, "class", UNKNOWN)),  # checked last, as before
            )
        except KeyError as exc:
            raise ConfigError(f"{where} has no {exc.args[0]!r}", "see docs/signatures.md") from None
        except TypeError as exc:
            raise ConfigError(f"{where}: {exc}", "see docs/signatures.md") from None
        if not signature.patterns:
            raise ConfigError(f"{where} has no patterns", "give at least one regular expression")
        signatures.append(signature)
    return tuple(signatures)


def load(path: str | None) -> tuple[Signature, ...]:
    """The table: the user's signatures from `path` first (they win), then the built-in ones."""
    if not path:
        return SIGNATURES
    try:
        data = load_toml(path)
    except BadFile as exc:
        raise ConfigError(f"--signatures {path}: {exc}", "give a readable TOML file") from None
    unknown = sorted(set(data) - {"signature"})
    records = data.get("signature", [])
    if unknown or not isinstance(records, list):
        raise ConfigError(
            f"--signatures {path}: expected only [[signature]] tables",
            "see docs/signatures.md",
        )
    return from_records(records, path) + SIGNATURES
