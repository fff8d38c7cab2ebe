"""The log directory must be one no other user can swap for a link (ssh's StrictModes).

safelaunch creates run directories, rank logs, report.json and `latest` under
--log-dir, often as root on a shared machine. If another user owns the log directory
or any directory above it, or can write to one that is not sticky, they can replace a
path we are about to create with a symlink to, say, /etc/shadow, and our write lands
there. Checking each component once, before anything is created, closes that for every
file below it; the files themselves are still opened with O_NOFOLLOW (defence in depth).
Decision: refuse with a clear line (exit 78), never silently write elsewhere.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from safelaunch.errors import PreflightError


def _owner(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _problem(path: Path, me: int) -> str | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None  # missing (created later, by us), or unusable: the launch then runs
        # with console output only, as for any log directory it cannot write
    if info.st_uid not in (0, me):
        return f"is owned by {_owner(info.st_uid)}, not by you or root"
    if stat.S_ISLNK(info.st_mode):
        return None  # a link's own mode means nothing; its target is checked too
    if not stat.S_ISDIR(info.st_mode):
        # nothing is ever created below a file or a device (/dev/null, writable by all):
        # the launch runs with console output only and says so, as for a plain file
        return None
    others_write = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if others_write and not info.st_mode & stat.S_ISVTX:
        return "can be written by other users (and is not sticky like /tmp)"
    return None


def _chain(path: Path) -> list[Path]:
    return [*reversed(path.parents), path]


def check_log_root(log_dir: Path) -> None:
    """Refuse a log directory another user could redirect; nothing is created here."""
    me = os.geteuid()
    given = Path(os.path.abspath(log_dir))
    for component in _chain(given) + _chain(given.resolve()):
        problem = _problem(component, me)
        if problem is not None:
            raise PreflightError(
                f"log directory {log_dir}: {component} {problem}; another user could swap "
                "a path safelaunch writes for a link",
                "use a --log-dir only you (or root) can write, like ssh's StrictModes asks",
            )
