"""Lint results cached by the script's content, so a launch pays a hash and a small read.

The cache is a directory of this user's own (mode 0700, not a symlink, owned by us);
anything else and the cache is simply not used. Entries are written to a temporary
file and renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import zlib
from collections.abc import Mapping
from pathlib import Path

from safelaunch.lint import RULES_VERSION, LintResult, from_json, lint_source, to_json


def cache_dir(environ: Mapping[str, str]) -> Path:
    """$SAFELAUNCH_CACHE_DIR, else $XDG_CACHE_HOME/safelaunch/lint, else ~/.cache/..."""
    if environ.get("SAFELAUNCH_CACHE_DIR"):
        return Path(environ["SAFELAUNCH_CACHE_DIR"])
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "safelaunch" / "lint"


def _own_dir(path: Path) -> bool:
    with contextlib.suppress(OSError):
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        info = path.lstat()
    except OSError:
        return False
    # others able to write there could plant results: then no cache
    private = not info.st_mode & 0o022
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and private


def _read(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, encoding="utf-8") as entry:
        return entry.read()


def content_key(source: bytes) -> str:
    """The cache's name for a script's content (and the rules' version).

    Two checksums and the length, not sha256: importing hashlib loads OpenSSL, ~3 ms of
    every launch before its ranks start (bench/vs_torchrun.py), and zlib is loaded anyway.
    The cache is a private directory (_own_dir), so nobody plants a colliding entry; an
    accidental collision of both checksums at the same length is a 2**-64 chance.
    """
    data = RULES_VERSION.encode() + b"\0" + source
    return f"{len(data):x}-{zlib.crc32(data):08x}-{zlib.adler32(data):08x}"


def lint_cached(script: Path, environ: Mapping[str, str]) -> LintResult:
    """The script's findings: from the cache when its content was linted before."""
    try:
        source = script.read_bytes()
    except OSError as exc:
        return LintResult(problem=f"not read: {exc.strerror}")
    key = content_key(source)
    where = cache_dir(environ)
    usable = _own_dir(where)
    if usable:
        text = _read(where / f"{key}.json")
        if text is not None:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                return from_json(text)
    result = lint_source(source, str(script))
    if usable:
        with contextlib.suppress(OSError):
            fd, temporary = tempfile.mkstemp(dir=where, prefix=".lint-")
            with os.fdopen(fd, "w", encoding="utf-8") as entry:
                entry.write(to_json(result))
            os.replace(temporary, where / f"{key}.json")
    return result
