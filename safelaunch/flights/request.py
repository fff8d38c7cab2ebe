"""Asking the ranks for torch's flight recorder before they are stopped.

The dump signal that makes faulthandler print a rank's threads also makes the rank
write its flight record (safelaunch/rank/flight_recorder.py) into `<attempt>/flight/`. Only
ranks that reached torch.distributed (their comm file exists) are waited for, so a
job without collectives never pays the wait; and only ranks that catch the signal now
are sent it: its default action kills, and a rank exiting on its own ignores it from
its last exit handler on (rank/flight_recorder.py), or is past the handler already.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from safelaunch.plan import DUMP_SIGNAL
from safelaunch.rank import names
from safelaunch.rundir import flight_file
from safelaunch.supervisor.procs import is_alive, process_state, signal_pids
from safelaunch.supervisor.spawn import StartedRank

# The dump takes ~0.1 ms once the rank's dump thread gets the GIL; a rank whose main
# thread holds the GIL in native code never answers, so the wait is bounded.
FLIGHT_WAIT = 1.0
# A rank past its last exit handler (it raised, or returned) is only tearing torch down:
# 0.1-1 s here under load. Stopped meanwhile it would read as stopped by safelaunch.
EXIT_WAIT = 3.0
REAP_WAIT = 0.5


def uses_collectives(started: StartedRank) -> bool:
    """The rank called init_process_group (it wrote its comm file), and can answer."""
    comm = started.spec.env.get(names.COMM_FILE)
    return (
        started.spec.bootstrapped
        and comm is not None
        and Path(comm).exists()
        and process_state(started.process.pid) not in ("T", "Z", "gone")
    )


def _signal_mask(pid: int, field: bytes) -> int:
    """A /proc/PID/status signal mask (SigCgt: caught, SigIgn: ignored); 0 when unreadable."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(field + b":"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return 0


def catches(pid: int, signum: int) -> bool:
    """The process has a handler for `signum` now: sending it does not kill."""
    return bool(_signal_mask(pid, b"SigCgt") >> (signum - 1) & 1)


def exiting(pid: int) -> bool:
    """A rank past its last exit handler: it ignores the dump signal from there on."""
    return bool(_signal_mask(pid, b"SigIgn") >> (DUMP_SIGNAL - 1) & 1)


def request_records(
    live: Sequence[StartedRank], attempt_dir: Path, signalled: bool, since: float | None = None
) -> None:
    """Signal the ranks (unless `signalled` already, at `since`) and wait for their flight
    records.

    A rank exiting on its own (its record written as it raised) is waited for too, up to
    EXIT_WAIT: stopped now, it would read as stopped by safelaunch.
    """
    ranks = [s for s in live if uses_collectives(s)]
    asked = [s for s in ranks if catches(s.process.pid, DUMP_SIGNAL)]
    leaving = [s for s in ranks if s not in asked and exiting(s.process.pid)]
    if not asked and not leaving:
        return
    since = time.time() if since is None or not signalled else since
    if not signalled and asked:
        signal_pids([s.process.pid for s in asked], DUMP_SIGNAL)
    wait_for_records(asked, flight_file.directory(attempt_dir), since, leaving)
    _until_reaped([s for s in ranks if not is_alive(s.process.pid)])


def _until_reaped(ended: Sequence[StartedRank]) -> None:
    """Let the waiter threads record the exits of ranks that ended during the wait.

    A rank's end is timed when its waiter thread reaps it; the teardown begins right after
    this wait. Timed after that, a rank that ended on its own would read as stopped.
    """
    deadline = time.monotonic() + REAP_WAIT
    while any(s.process.returncode is None for s in ended) and time.monotonic() < deadline:
        time.sleep(0.005)
    if ended:
        time.sleep(0.005)  # the waiter thread times the exit just after it reaps


def wait_for_records(
    asked: Sequence[StartedRank],
    directory: Path,
    since: float,
    leaving: Sequence[StartedRank] = (),
    wait: float = FLIGHT_WAIT,
) -> None:
    """Until every asked rank wrote a record after `since` (or exited), and every leaving
    one exited, or the wait for it (`wait` s for the asked ones) ran out."""
    now = time.monotonic()
    asked_until, leaving_until = now + wait, now + EXIT_WAIT
    pending = list(asked)
    gone = list(leaving)
    while pending or gone:
        now = time.monotonic()
        pending = [
            s
            for s in pending
            if now < asked_until
            and is_alive(s.process.pid)
            and not _fresh(directory / flight_file.name(s.spec.rank), since)
        ]
        gone = [s for s in gone if now < leaving_until and is_alive(s.process.pid)]
        if pending or gone:
            time.sleep(0.01)


def _fresh(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since - 0.05
    except OSError:
        return False
