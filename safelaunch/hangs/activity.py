"""What a rank's whole process tree does while its main thread looks idle.

A rank that waits on `subprocess.run(...)` (an upload, an eval tool, a compiler), or
writes a checkpoint in one native call, has a frozen stack and prints nothing, yet
it works. The kernel knows: CPU time and bytes read and written by the rank and its
descendants (/proc/<pid>/stat, /proc/<pid>/io), and a process waiting on the disk
(state D). This is also how a starved heartbeat thread is told apart from a hung
rank on an oversubscribed machine: the CPU the rank actually got counts, whether
or not its heartbeat thread found the time to say so.

Rates, not any change: a hung rank still spends a little (its heartbeat thread
writes a small record every interval; an idle helper process wakes up now and then).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from safelaunch.proctree import TreeScan, reach
from safelaunch.rundir.heartbeat_file import Beat

CPU_SHARE = 0.05  # CPU seconds per wall second (5% of one core) that count as work
CPU_FLOOR = 0.05  # and at least this many CPU seconds: one scheduler tick is noise
IO_RATE = 64 * 1024  # bytes per wall second (a heartbeat record is ~1 KiB per interval)
IO_FLOOR = 256 * 1024
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeCounters:
    """Counters of one rank's process tree at one moment."""

    own_cpu: float  # seconds, the rank's own process (every thread)
    child_cpu: float  # seconds, its descendants: live ones, and the ones already reaped
    io: int  # bytes read + written (rchar + wchar: disk, pipes and sockets alike)
    on_disk: bool  # a process of the tree is in uninterruptible sleep (D): waiting on I/O


def worked(before: TreeCounters, now: TreeCounters, elapsed: float, spins: bool) -> str | None:
    """What the tree did since `before` (`elapsed` seconds ago) that counts as work; None if idle.

    `spins`: the rank's own CPU proves nothing (NCCL waits spin in a CUDA sync);
    its children's still does.
    """
    if now.on_disk:
        return "a process waiting on the disk"
    cpu = now.child_cpu - before.child_cpu
    if not spins:
        cpu += now.own_cpu - before.own_cpu
    if cpu >= max(CPU_FLOOR, CPU_SHARE * elapsed):
        return f"{cpu:.2f} CPU s"
    io = now.io - before.io
    if io >= max(IO_FLOOR, IO_RATE * elapsed):
        return f"{io} bytes of I/O"
    return None


class ActivityWatch:
    """Per rank: the wall clock at which its process tree was last seen working."""

    def __init__(self) -> None:
        self._base: dict[
            int, tuple[TreeCounters, float]
        ] = {}  # rank -> (counters, wall) at the last work
        self.last_work: dict[int, float] = {}

    def update(
        self, usage: Mapping[int, TreeCounters], beats: Mapping[int, Beat | None], now: float
    ) -> None:
        """Compare each rank's counters with those at its last work.

        The heartbeat thread's own CPU time (in its record) is not the rank's work.
        """
        for rank, counted in usage.items():
            beat = beats.get(rank)
            spins = beat is not None and beat.spins
            current = replace(counted, own_cpu=counted.own_cpu - (beat.cost if beat else 0.0))
            base = self._base.get(rank)
            if base is None or _went_back(base[0], current):  # first look, or a child left the tree
                self._base[rank] = (current, now)
                continue
            if worked(base[0], current, now - base[1], spins) is not None:
                self._base[rank] = (current, now)
                self.last_work[rank] = now


def _went_back(before: TreeCounters, now: TreeCounters) -> bool:
    """A descendant left the tree (reparented to us, or reaped by a process outside it)."""
    return now.child_cpu < before.child_cpu or now.io < before.io


class TreeSampler:
    """TreeCounters of the ranks' trees, one pass over /proc at a time: after the first pass
    only the job's processes and new ones are read (proctree.py)."""

    def __init__(self) -> None:
        self._scan: TreeScan[tuple[bytes, float, float]] = TreeScan(_read_stat)

    def sample(self, roots: Mapping[int, int], now: float) -> dict[int, TreeCounters]:
        """Per rank (rank -> pid of its process); `now` a monotonic clock."""
        found = self._scan.scan(roots.values(), now)
        usage = {}
        for rank, root in roots.items():
            if root not in found:
                continue
            tree = reach(found, [root])
            _, (_, own, reaped) = found[root]
            usage[rank] = TreeCounters(
                own_cpu=own,
                child_cpu=reaped + sum(found[pid][1][1] + found[pid][1][2] for pid in tree),
                io=sum(_io(pid) for pid in (root, *tree)),
                on_disk=any(found[pid][1][0] == b"D" for pid in (root, *tree)),
            )
        return usage


def _read_stat(pid: int) -> tuple[int, tuple[bytes, float, float]] | None:
    """(parent, (state, own CPU s, reaped children's CPU s)) from /proc/PID/stat."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            raw = os.read(fd, 4096)
        finally:
            os.close(fd)
        fields = raw[raw.rfind(b")") + 2 :].split()  # comm may contain anything
        # after comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
        own = (int(fields[11]) + int(fields[12])) / _TICKS
        reaped = (int(fields[13]) + int(fields[14])) / _TICKS
        return int(fields[1]), (fields[0], own, reaped)
    except (OSError, ValueError, IndexError):
        return None


def _io(pid: int) -> int:
    """rchar + wchar of one process (including what its reaped children did); 0 if unreadable."""
    try:
        with open(f"/proc/{pid}/io", "rb") as source:
            text = source.read()
    except OSError:
        return 0
    total = 0
    for line in text.splitlines():
        name, _, value = line.partition(b":")
        if name in (b"rchar", b"wchar"):
            total += int(value)
    return total
