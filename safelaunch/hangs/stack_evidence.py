"""Collecting every rank's stacks when a hang is declared."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path

from safelaunch.flights.request import uses_collectives, wait_for_records
from safelaunch.hangs.detection import ALL_SEEN, HangEvidence, RankProgress, Unseen
from safelaunch.hangs.rhythm import Deadline
from safelaunch.plan import DUMP_SIGNAL, LaunchPlan
from safelaunch.rundir import flight_file, stack_files
from safelaunch.supervisor.procs import process_state, signal_pids
from safelaunch.supervisor.spawn import StartedRank

STACK_WAIT = 2.0  # faulthandler answers in ~1 ms (a resumed stopped rank later); py-spy ~1 s


def take_evidence(
    live: list[StartedRank],
    progress: list[RankProgress],
    wall: float,
    plan: LaunchPlan,
    unseen: Unseen = ALL_SEEN,
    deadline: Deadline | None = None,
) -> HangEvidence:
    """A declared hang's evidence: states, every live rank's stacks; saved as hang.json."""
    states = {s.spec.rank: process_state(s.process.pid) for s in live}
    evidence = HangEvidence(
        detected_at=wall,
        timeout=plan.hang_timeout if deadline is None else deadline.seconds,
        interval=plan.heartbeat_interval,
        ranks=tuple(progress),
        states=states,
        stack_files=collect_stacks(live, stack_files.directory(plan.attempt_dir)),
        unseen=unseen,
        basis="fixed" if deadline is None else str(deadline.basis),
        why="" if deadline is None else deadline.why,
        auto=deadline is not None and deadline.auto,
    )
    save_evidence(evidence, plan.attempt_dir)
    return evidence


def collect_stacks(live: list[StartedRank], target: Path) -> dict[int, Path]:
    """Every live rank's threads, from faulthandler (and py-spy where installed), into `target`."""
    # A stopped rank is not resumed to answer (its main thread would run on before the
    # dump, and it may be a debugger's): py-spy can still read it, else its last heartbeat.
    dumpable = [s for s in live if s.spec.bootstrapped and process_state(s.process.pid) != "T"]
    asked_at = time.time()
    signal_pids([s.process.pid for s in dumpable], DUMP_SIGNAL)
    spies = _start_py_spy([s for s in live if s.spec.bootstrapped])
    deadline = time.monotonic() + STACK_WAIT
    while time.monotonic() < deadline and not all(_has_data(s) for s in dumpable):
        time.sleep(0.02)
    # the same signal wrote their flight records (torch's collective history) meanwhile
    wait_for_records(
        [s for s in dumpable if uses_collectives(s)],
        flight_file.directory(target.parent),
        asked_at,
    )
    files: dict[int, Path] = {}
    with contextlib.suppress(OSError):
        target.mkdir(exist_ok=True)
    for started in dumpable:
        rank = started.spec.rank
        with contextlib.suppress(OSError):
            copy = stack_files.collected(target, rank)
            shutil.copyfile(started.spec.stacks_file, copy)
            files[rank] = copy
    for rank, spy in spies.items():
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            text, _ = spy.communicate(timeout=max(0.1, deadline + 5 - time.monotonic()))
            stack_files.py_spy(target, rank).write_bytes(text)
        with contextlib.suppress(ProcessLookupError):
            spy.kill()
        spy.wait()
    return files


def save_evidence(hang: HangEvidence, attempt_dir: Path) -> None:
    """What the launcher saw, as JSON, next to the stacks (stacks/hang.json)."""
    ranks = [
        {
            "rank": p.rank,
            "last_progress": p.last_progress,
            "beat": None if p.beat is None else p.beat.as_dict(),
            "heartbeat": p.heartbeat,
        }
        for p in hang.ranks
    ]
    evidence = {
        "detected_at": hang.detected_at,
        "timeout": hang.timeout,
        "deadline": {"auto": hang.auto, "basis": hang.basis, "why": hang.why},
        "states": {str(k): v for k, v in hang.states.items()},
        "ranks": ranks,
        "unseen": [list(span) for span in hang.unseen.spans],  # (start, end): a suspend
    }
    stack_files.write_hang_evidence(attempt_dir, evidence)


def _has_data(started: StartedRank) -> bool:
    try:
        return started.spec.stacks_file.stat().st_size > 0
    except OSError:
        return False


def _start_py_spy(ranks: list[StartedRank]) -> dict[int, subprocess.Popen[bytes]]:
    """py-spy's view with native frames, where py-spy is installed (optional)."""
    tool = shutil.which("py-spy")
    if tool is None:
        return {}
    spies = {}
    for started in ranks:
        with contextlib.suppress(OSError):
            spies[started.spec.rank] = subprocess.Popen(
                [tool, "dump", "--native", "--pid", str(started.process.pid)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
    return spies
