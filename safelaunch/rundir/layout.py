"""The run directory's levels: `<log dir>/<run id>/attempt_<n>/`, reruns, `latest`.

Each run gets `<log dir>/<run id>` (ids sort by start time) with one directory per attempt
(`attempt_0`, `attempt_1` after a restart) and per isolation rerun (its own name, e.g.
`isolate_gloo`); `<log dir>/latest` points at the newest run. Files that must not be
world-readable (heartbeat, exit and stack records) live in a private 0700 directory
outside the log dir with one subdirectory per attempt of the same name.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

ATTEMPT_PREFIX = "attempt_"
LATEST = "latest"
PRIVATE_PREFIX = "safelaunch-"  # the private directory's name: safelaunch-<run id>-XXXX


def attempt_name(attempt: int) -> str:
    return f"{ATTEMPT_PREFIX}{attempt}"


def attempt_dir(run_dir: Path, attempt: int) -> Path:
    return run_dir / attempt_name(attempt)


def attempt_pattern(run_dir: Path) -> str:
    """`<run>/attempt_{n}`, as messages show where each attempt's files go."""
    return f"{run_dir}/{ATTEMPT_PREFIX}{{n}}"


def numbered(name: str, prefix: str, suffix: str = "") -> int | None:
    """N of a name `<prefix><N><suffix>` (ASCII digits only); None for any other name."""
    if not (name.startswith(prefix) and name.endswith(suffix)):
        return None
    digits = name[len(prefix) : len(name) - len(suffix)]
    return int(digits) if digits.isascii() and digits.isdigit() else None


def rank_files(directory: Path, suffix: str) -> list[tuple[int, Path]]:
    """(N, path) of every `rank<N><suffix>` in `directory`, by N; none when unreadable."""
    try:
        paths = list(directory.glob(f"rank*{suffix}"))
    except OSError:
        return []
    found = [(n, p) for p in paths if (n := numbered(p.name, "rank", suffix)) is not None]
    return sorted(found)


def attempt_number(name: str) -> int | None:
    """n of `attempt_<n>`; None for a rerun or anything else."""
    return numbered(name, ATTEMPT_PREFIX)


def latest(log_dir: Path) -> Path:
    return log_dir / LATEST
