"""The Gloo rerun's ledger: `<attempt>/rank<N>.collectives.log`, one line per collective.

Written by the rank (safelaunch/rank/dist_hooks.py) before each Python-level collective on the
default group runs, one write(2) a line, so that it survives the abort a mismatch often
ends in: `<number>\\t<op>\\t<dtype[shape]>`. Read by the isolation verdicts.
"""

from __future__ import annotations

import os

from safelaunch.rundir.layout import rank_files

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

SUFFIX = ".collectives.log"
LIMIT = 1_000_000  # lines a rank writes at most; a time-boxed rerun stays far below


def name(rank: int | str) -> str:
    return f"rank{rank}{SUFFIX}"


class LedgerWriter:
    """The rank's side."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._count = 0

    def write(self, op: str, what: str) -> None:
        if self._count >= LIMIT:
            return
        self._count += 1
        os.write(self._fd, f"{self._count}\t{op}\t{what}\n".encode())


def read_all(attempt_dir: Path) -> dict[int, dict[int, tuple[str, str]]]:
    """rank -> {collective number: (op, what it was called with)}."""
    return {rank: _entries(path) for rank, path in rank_files(attempt_dir, SUFFIX)}


def _entries(path: Path) -> dict[int, tuple[str, str]]:
    entries = {}
    try:
        for line in path.read_text(errors="replace").splitlines():
            number, op, what = [*line.split("\t"), "", ""][:3]
            if number.isdigit():
                entries[int(number)] = (op, what)
    except OSError:
        pass
    return entries
