"""The exit record: `<private dir>/<attempt>/rank<N>.exit.json`, beside the heartbeat.

The rank writes it on its way out (safelaunch/rank/bootstrap.py: how it left, where, and
how many collectives it had issued), and at once when it destroys its default group
(`left_at`). Read by the diagnosis of ranks that left early (diagnose/leaving.py).
"""

from __future__ import annotations

from safelaunch.rundir.frozen import Record
from safelaunch.rundir.heartbeat_file import Frame
from safelaunch.rundir.jsontext import write_atomically

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

SUFFIX = ".exit.json"


class ExitRecord(Record):
    """How one rank's Python code ended, as it wrote it."""

    rank: int
    # "sys.exit" | "returned" | "destroy_process_group" (while it still ran) | "raised"
    # (written only when non-daemon threads kept the process alive after it raised)
    how: str
    code: int | str | None  # SystemExit's code (a string: the message python printed)
    frames: tuple[Frame, ...]  # innermost first
    seq: int | None  # collectives issued when it left
    left_at: int | None = None  # it destroyed its default group after this many
    # the non-daemon threads still alive when the script ended (they keep the process
    # alive): (name, frames innermost first)
    threads: tuple[tuple[str, tuple[Frame, ...]], ...] = ()


def name(rank: int | str) -> str:
    return f"rank{rank}{SUFFIX}"


def write(
    path: str,
    *,
    how: str,
    code: object,
    frames: list[Frame],
    now: float,
    seq: int | None,
    left_at: int | None = None,
    threads: list[tuple[str, list[Frame]]] | None = None,
) -> None:
    """The rank's side (it must not raise: the caller suppresses)."""
    record: dict[str, object] = {
        "how": how,
        "code": code if isinstance(code, int) or code is None else str(code),
        "frames": frames,
        "time": now,
        "seq": seq,
        "left_at": left_at,
    }
    if threads:
        record["threads"] = threads
    write_atomically(path, record)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _frames(value: object) -> tuple[Frame, ...]:
    if not isinstance(value, list):
        return ()
    return tuple((str(f), int(n), str(fn)) for f, n, fn in value)


def _threads(value: object) -> tuple[tuple[str, tuple[Frame, ...]], ...]:
    if not isinstance(value, list):
        return ()
    return tuple((str(name), _frames(frames)) for name, frames in value)


def read_all(directory: Path | None) -> dict[int, ExitRecord]:
    """Every exit record in an attempt's private directory, by rank; unreadable ones left out."""
    import json  # the launcher's side only

    from safelaunch.rundir.layout import rank_files  # not at the top: every rank imports this

    found: dict[int, ExitRecord] = {}
    if directory is None:
        return found
    for rank, path in rank_files(directory, SUFFIX):
        try:
            record = json.loads(path.read_bytes())
            if not isinstance(record, dict):
                continue
            code = record.get("code")
            found[rank] = ExitRecord(
                rank=rank,
                how=str(record.get("how", "returned")),
                code=code if isinstance(code, (int, str)) else None,
                frames=_frames(record.get("frames")),
                seq=_count(record.get("seq")),
                left_at=_count(record.get("left_at")),
                threads=_threads(record.get("threads")),
            )
        except (OSError, ValueError, TypeError, RecursionError):
            continue
    return found


def remove(path: str) -> None:
    """The rank's side: a new default group after a destroy makes the record void."""
    import os

    try:  # noqa: SIM105 - contextlib costs a rank its import at start
        os.unlink(path)
    except OSError:
        pass
