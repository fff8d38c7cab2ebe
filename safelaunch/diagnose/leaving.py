"""Ranks that left early: how, where and when a rank ended while its peers still talked.

A rank that returns, calls sys.exit or skips destroy_process_group while the others
are still in collectives is the root cause whatever its exit code: the survivors only
see "Connection closed by peer" or a store error, which are consequences. The rank
writes its exit record on its way out (safelaunch/rundir/exit_file.py); its last
heartbeat record says how many collectives it and the others had issued.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safelaunch.diagnose.frames import user_frame
from safelaunch.rundir import exit_file, heartbeat_file
from safelaunch.rundir.exit_file import ExitRecord
from safelaunch.vocab import StrEnum, word_of


class LeaveHow(StrEnum):
    """How a rank's Python code ended (rank/beat.py writes these words in its exit record)."""

    SYS_EXIT = "sys.exit"
    HARD_EXIT = "os._exit"  # no exception, no atexit: the bootstrap's wrapper wrote it
    RETURNED = "returned"  # the end of the script
    DESTROYED = "destroy_process_group"  # while the rank still ran
    RAISED = "raised"  # written only when non-daemon threads outlived the script


_ENDED = {
    LeaveHow.SYS_EXIT: "called sys.exit",
    LeaveHow.HARD_EXIT: "called os._exit",
    LeaveHow.RETURNED: "returned",
    LeaveHow.RAISED: "raised",
    LeaveHow.DESTROYED: "returned",
}


EXIT_CALLS = frozenset({LeaveHow.SYS_EXIT, LeaveHow.HARD_EXIT})  # it ended itself, a code given


def exit_call(leave: Leave) -> str:
    """`SystemExit: sys.exit(3)`, `os._exit(3)`: the call as the rank made it."""
    if leave.how == LeaveHow.HARD_EXIT:
        return f"os._exit({leave.code!r})"
    return f"SystemExit: sys.exit({leave.code!r})"


def _how(record: Mapping[str, Any]) -> LeaveHow | None:
    return word_of(record.get("how", LeaveHow.RETURNED), LeaveHow)


@dataclass(frozen=True, slots=True, kw_only=True)
class Leave:
    """How one rank's Python code ended without an uncaught error."""

    rank: int
    how: LeaveHow | None  # None: a word this version does not know
    code: int | str | None  # SystemExit's code (a string: the message python printed)
    location: str | None  # the user's frame that raised SystemExit (or destroyed the group)
    seq: int | None  # collectives it had issued when it left
    # it destroyed its default group after this many collectives (None: it never did):
    # from there on it took part in no collective, whenever its process ended
    left_at: int | None = None
    threads: tuple[tuple[str, str | None], ...] = ()  # non-daemon threads alive: (name, where)


def _thread_place(frames: tuple[tuple[str, int, str], ...]) -> str | None:
    """The thread's innermost frame in the user's code (else its innermost at all)."""
    return user_frame(list(frames), also_skip=("<string>", "safelaunch/rank/"), fallback=True)


def _leave(record: ExitRecord) -> Leave:
    return Leave(
        rank=record.rank,
        how=word_of(record.how, LeaveHow),
        code=record.code,
        location=user_frame(list(record.frames), also_skip=("<string>",)),
        seq=record.seq,
        left_at=record.left_at,
        threads=tuple((name, _thread_place(frames)) for name, frames in record.threads),
    )


def still_running(leave: Leave) -> str | None:
    """Why the rank's process outlived its script: "its script returned but its process
    did not exit: non-daemon thread 'saver' at train.py:30 in save still runs"; None when
    no such thread was alive as the script ended."""
    if not leave.threads:
        return None
    ended = _ENDED.get(leave.how, "ended") if leave.how is not None else "ended"
    threads = ", ".join(
        f"'{name}'" + (f" at {place}" if place else "") for name, place in leave.threads
    )
    plural = "s" if len(leave.threads) > 1 else ""
    verb = "still run" if plural else "still runs"
    return (
        f"its script {ended} but its process did not exit: non-daemon thread{plural} "
        f"{threads} {verb}"
    )


def read_exits(heartbeat_dir: Path | None) -> dict[int, Leave]:
    """Every exit record the ranks wrote, by rank (those that raised too): read once, for
    lingering_of, thread_places and leaves_of."""
    return {rank: _leave(record) for rank, record in exit_file.read_all(heartbeat_dir).items()}


def read_lingering(heartbeat_dir: Path | None) -> dict[int, str]:
    """lingering_of the ranks' exit records."""
    return lingering_of(read_exits(heartbeat_dir))


def lingering_of(exits: Mapping[int, Leave]) -> dict[int, str]:
    """Ranks whose script ended while non-daemon threads kept running, with why
    (still_running), by rank: those that raised too."""
    return {rank: why for rank, leave in exits.items() if (why := still_running(leave))}


def thread_places(exits: Mapping[int, Leave]) -> dict[int, str]:
    """Where the one place its lingering non-daemon threads are, by rank (lingering_of's
    ranks whose threads are all at one line)."""
    found = {}
    for rank, leave in exits.items():
        places = {where for _, where in leave.threads}
        if len(places) == 1 and (place := places.pop()) is not None:
            found[rank] = place
    return found


def left_collectives(leave: Leave | None) -> str | None:
    """`left the collectives after #3 (destroy_process_group)` for a rank that destroyed its
    default group (the count when it is known); None when it never did."""
    if leave is None or (leave.left_at is None and leave.how != LeaveHow.DESTROYED):
        return None
    after = f" after #{leave.left_at}" if leave.left_at is not None else ""
    return f"left the collectives{after} (destroy_process_group)"


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_leaves(heartbeat_dir: Path | None) -> dict[int, Leave]:
    """leaves_of the ranks' exit records."""
    return leaves_of(read_exits(heartbeat_dir))


def leaves_of(exits: Mapping[int, Leave]) -> dict[int, Leave]:
    """The exit records of code that ended without an uncaught error; empty when there
    are none (a rank that raised left its error)."""
    return {rank: leave for rank, leave in exits.items() if leave.how != LeaveHow.RAISED}


def read_seqs(heartbeat_dir: Path | None, ranks: list[int]) -> dict[int, int]:
    """The last collective count in each rank's heartbeat record (its final one at exit)."""
    seqs: dict[int, int] = {}
    if heartbeat_dir is None:
        return seqs
    for rank in ranks:
        beat = heartbeat_file.read(rank, heartbeat_file.path(heartbeat_dir, rank))
        if beat is not None and isinstance(beat.seq, int):
            seqs[rank] = beat.seq
    return seqs


def read_counts(heartbeat_dir: Path | None, ranks: list[int]) -> dict[int, int | None]:
    """Each rank's last heartbeat record's collective count, for the ranks that wrote one
    (None: it had no process group then)."""
    counts: dict[int, int | None] = {}
    if heartbeat_dir is None:
        return counts
    for rank in ranks:
        beat = heartbeat_file.read(rank, heartbeat_file.path(heartbeat_dir, rank))
        if beat is not None:
            counts[rank] = beat.seq if isinstance(beat.seq, int) else None
    return counts


def leave_record(leave: Leave) -> dict[str, Any]:
    """report.json's form (explain reads it back)."""
    return {
        "how": leave.how,
        "code": leave.code,
        "location": leave.location,
        "seq": leave.seq,
        "left_at": leave.left_at,
        "threads": [{"name": name, "location": place} for name, place in leave.threads],
    }


def leave_from_record(rank: int, record: Mapping[str, Any]) -> Leave:
    """The inverse of leave_record."""
    code, seq, location = record.get("code"), record.get("seq"), record.get("location")
    return Leave(
        rank=rank,
        how=_how(record),
        code=code if isinstance(code, (int, str)) else None,
        location=location if isinstance(location, str) else None,
        seq=seq if isinstance(seq, int) else None,
        left_at=_count(record.get("left_at")),
        threads=_threads_back(record.get("threads")),
    )


def _threads_back(value: object) -> tuple[tuple[str, str | None], ...]:
    if not isinstance(value, list):
        return ()
    return tuple(
        (str(t.get("name")), t["location"] if isinstance(t.get("location"), str) else None)
        for t in value
        if isinstance(t, dict)
    )


def describe_leave(leave: Leave | None, seqs: Mapping[int, int], rank: int) -> list[str]:
    """How it left (a sys.exit is shown as the error line) and how far each rank had got."""
    lines = []
    if leave is not None and leave.how == LeaveHow.RETURNED:  # a sys.exit is shown as its error
        lines.append("left:  its script returned (reached its end) while the others still ran")
    if leave is not None and (why := still_running(leave)) is not None:
        lines.append(f"alive: {why}")
    mine = leave.seq if leave is not None and leave.seq is not None else seqs.get(rank)
    others = {r: s for r, s in seqs.items() if r != rank}
    if mine is not None or others:
        text = f"rank {rank} had issued {mine} collective(s)" if mine is not None else ""
        if others:
            spread = sorted(set(others.values()))
            span = str(spread[0]) if len(spread) == 1 else f"{spread[0]}-{spread[-1]}"
            text += ("; " if text else "") + f"the others had reached {span}"
        lines.append(f"count: {text}")
    return lines
