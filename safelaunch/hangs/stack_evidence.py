"""Collecting every rank's stacks when a hang is declared."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path

from safelaunch.flights.request import FLIGHT_WAIT, catches, uses_collectives, wait_for_records
from safelaunch.hangs.child_stacks import answered, ask, find_children, keep
from safelaunch.hangs.detection import ALL_SEEN, ChildProcess, HangEvidence, RankProgress, Unseen
from safelaunch.hangs.rhythm import Deadline
from safelaunch.plan import DUMP_SIGNAL, LaunchPlan
from safelaunch.rundir import flight_file, stack_files
from safelaunch.supervisor.procs import is_alive, process_state, signal_pids
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
    files, children = collect_stacks(live, stack_files.directory(plan.attempt_dir))
    evidence = HangEvidence(
        detected_at=wall,
        timeout=plan.hang_timeout if deadline is None else deadline.seconds,
        interval=plan.heartbeat_interval,
        ranks=tuple(progress),
        states=states,
        stack_files=files,
        unseen=unseen,
        children=children,
        basis="fixed" if deadline is None else str(deadline.basis),
        why="" if deadline is None else deadline.why,
        auto=deadline is not None and deadline.auto,
    )
    save_evidence(evidence, plan.attempt_dir)
    return evidence


def collect_stacks(
    live: list[StartedRank],
    target: Path,
    *,
    wait: float = STACK_WAIT,
    spy_grace: float | None = 5.0,
    only_catching: bool = False,
) -> tuple[dict[int, Path], dict[int, tuple[ChildProcess, ...]]]:
    """Every live rank's threads, from faulthandler (and py-spy where installed), into `target`.

    `wait`: how long the ranks get to answer; `spy_grace`: how much longer py-spy gets
    (None: no py-spy; it takes ~1 s a rank).
    `only_catching`: ask only ranks that catch the dump signal now (after a failure, a rank
    exiting on its own ignores it, or is past its handler: the default action kills).
    Returns the ranks' copies, and each rank's children (their own dumps copied too).
    """
    # A stopped rank is not resumed to answer (its main thread would run on before the
    # dump, and it may be a debugger's): py-spy can still read it, else its last heartbeat.
    dumpable = [s for s in live if s.spec.bootstrapped and process_state(s.process.pid) != "T"]
    if only_catching:
        dumpable = [s for s in dumpable if catches(s.process.pid, DUMP_SIGNAL)]
    children = find_children(dumpable)
    asked_at = time.time()
    signal_pids([s.process.pid for s in dumpable], DUMP_SIGNAL)
    ask(children)
    spies = _start_py_spy([s for s in live if s.spec.bootstrapped]) if spy_grace is not None else {}
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and not (
        all(has_data(s) or not is_alive(s.process.pid) for s in dumpable) and answered(children)
    ):
        time.sleep(0.01)
    # the same signal wrote their flight records (torch's collective history) meanwhile
    wait_for_records(
        [s for s in dumpable if uses_collectives(s)],
        flight_file.directory(target.parent),
        asked_at,
        # after a failure one deadline bounds it all; a hang's ranks get their full wait
        wait=max(0.05, deadline - time.monotonic()) if only_catching else FLIGHT_WAIT,
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
            grace = spy_grace or 0.0
            text, _ = spy.communicate(timeout=max(0.1, deadline + grace - time.monotonic()))
            stack_files.py_spy(target, rank).write_bytes(text)
        with contextlib.suppress(ProcessLookupError):
            spy.kill()
        spy.wait()
    return files, keep(children, target)


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
        "children": {
            str(rank): [{"pid": c.pid, "command": c.command, "dump": c.dump} for c in kids]
            for rank, kids in hang.children.items()
        },
    }
    stack_files.write_hang_evidence(attempt_dir, evidence)


def has_data(started: StartedRank) -> bool:
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
