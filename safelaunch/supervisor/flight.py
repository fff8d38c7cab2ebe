"""Asking the ranks for torch's flight recorder before they are stopped.

The dump signal that makes faulthandler print a rank's threads also makes the rank
write its flight record (safelaunch/rank/flight.py) into `<attempt>/flight/`. Only
ranks that reached torch.distributed (their comm file exists) are waited for, so a
job without collectives never pays the wait.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from safelaunch.plan import DUMP_SIGNAL, FLIGHT_DIR
from safelaunch.rank import names
from safelaunch.supervisor.procs import is_alive, process_state, signal_pids
from safelaunch.supervisor.spawn import StartedRank

# The dump takes ~0.1 ms once the rank's dump thread gets the GIL; a rank whose main
# thread holds the GIL in native code never answers, so the wait is bounded.
FLIGHT_WAIT = 1.0


def flight_dir(attempt_dir: Path) -> Path:
    """Where the ranks write their flight records."""
    return attempt_dir / FLIGHT_DIR


def uses_collectives(started: StartedRank) -> bool:
    """The rank called init_process_group (it wrote its comm file), and can answer."""
    comm = started.spec.env.get(names.COMM_FILE)
    return (
        started.spec.bootstrapped
        and comm is not None
        and Path(comm).exists()
        and process_state(started.process.pid) not in ("T", "Z", "gone")
    )


def request_records(live: Sequence[StartedRank], attempt_dir: Path, signalled: bool) -> None:
    """Signal the ranks (unless `signalled` already) and wait for their flight records."""
    asked = [s for s in live if uses_collectives(s)]
    if not asked:
        return
    since = time.time()
    if not signalled:
        signal_pids([s.process.pid for s in asked], DUMP_SIGNAL)
    wait_for_records(asked, flight_dir(attempt_dir), since)


def wait_for_records(asked: Sequence[StartedRank], directory: Path, since: float) -> None:
    """Until every asked rank wrote a record after `since`, exited, or the wait ran out."""
    deadline = time.monotonic() + FLIGHT_WAIT
    pending = list(asked)
    while pending and time.monotonic() < deadline:
        pending = [
            s
            for s in pending
            if is_alive(s.process.pid) and not _fresh(directory / f"rank{s.spec.rank}.json", since)
        ]
        if pending:
            time.sleep(0.01)


def _fresh(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since - 0.05
    except OSError:
        return False
