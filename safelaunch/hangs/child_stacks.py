"""The ranks' own children (DataLoader workers, subprocesses): who they are, and their stacks.

A rank blocked on its children shows only a wait in select or a queue; where the child
is tells why. A process forked from a rank after the bootstrap (a DataLoader worker)
keeps its faulthandler and writes its dump into a file named by its pid
(rank/bootstrap.py); that file's existence is the proof that the dump signal is ours
there. Any other child (an exec'd subprocess: the signal's default action would kill
it) is never signalled: it is named with its command line.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from safelaunch.flights.request import catches
from safelaunch.hangs.detection import ChildProcess
from safelaunch.plan import DUMP_SIGNAL
from safelaunch.rundir import stack_files
from safelaunch.supervisor.procs import descendants, is_alive, signal_pids
from safelaunch.supervisor.spawn import StartedRank

COMMAND_SHOWN = 120  # characters of a child's command line kept


def find_children(ranks: Sequence[StartedRank]) -> dict[int, tuple[ChildProcess, ...]]:
    """Every rank's live descendants, by rank; those that can dump have their file."""
    found: dict[int, tuple[ChildProcess, ...]] = {}
    for started in ranks:
        children = []
        for pid in sorted(descendants(started.process.pid)):
            dump = Path(stack_files.forked_dump_file(str(started.spec.stacks_file), pid))
            ours = dump.exists() and catches(pid, DUMP_SIGNAL)
            children.append(
                ChildProcess(pid=pid, command=_command(pid), dump=dump if ours else None)
            )
        if children:
            found[started.spec.rank] = tuple(children)
    return found


def ask(children: Mapping[int, Sequence[ChildProcess]]) -> None:
    """The dump signal to every child that writes its own dump (and only to those)."""
    signal_pids([c.pid for kids in children.values() for c in kids if c.dump], DUMP_SIGNAL)


def answered(children: Mapping[int, Sequence[ChildProcess]]) -> bool:
    """Every child asked has written its dump, or is gone."""
    return all(
        _has_data(c.dump) or not is_alive(c.pid)
        for kids in children.values()
        for c in kids
        if c.dump is not None
    )


def keep(
    children: Mapping[int, Sequence[ChildProcess]], target: Path
) -> dict[int, tuple[ChildProcess, ...]]:
    """The children with their dumps copied beside the ranks' (stacks/rank<N>.child<pid>.txt);
    a child that wrote nothing keeps no dump."""
    kept: dict[int, tuple[ChildProcess, ...]] = {}
    for rank, kids in children.items():
        copies = []
        for child in kids:
            copy = None
            if child.dump is not None and _has_data(child.dump):
                with contextlib.suppress(OSError):
                    copy = stack_files.collected_child(target, rank, child.pid)
                    shutil.copyfile(child.dump, copy)
            copies.append(ChildProcess(pid=child.pid, command=child.command, dump=copy))
        kept[rank] = tuple(copies)
    return kept


def _has_data(path: Path | None) -> bool:
    try:
        return path is not None and path.stat().st_size > 0
    except OSError:
        return False


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            text = cmdline.read(COMMAND_SHOWN * 2).replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"
    text = text.strip()
    return text if len(text) <= COMMAND_SHOWN else text[: COMMAND_SHOWN - 3] + "..."
