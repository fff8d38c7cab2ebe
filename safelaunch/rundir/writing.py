"""Writing the run directory's files from the launcher: atomic replacement, shown paths.

Kept apart from report.py, which imports diagnosis: the launch writes and names files
before its ranks start, and that path loads only what starting them needs (launch cost,
bench/vs_torchrun.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path


def shown_path(path: Path) -> str:
    """Relative to the working directory when that is shorter."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return relative if len(relative) < len(str(path)) else str(path)


Writer = Callable[[Path, str], bool]  # write_file's shape: atomic; False when it failed


def write_file(path: Path, text: str) -> bool:
    """Replace `path` atomically (report.json, report.html, the live state); False on error."""
    # A fresh name, created exclusively and never through a link; removed when the write
    # fails (a full disk), so no empty temporary is left behind.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    data = text.encode()
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return False
    return True
