"""CPU, memory and GPU memory of the ranks running on this host, measured when asked.

Each rank's whole process tree counts (the rank and its children: DataLoader workers),
which the launcher does not track. Read from /proc directly (safelaunch is Linux only):
one scan of /proc/<pid>/stat for every process gives the parents, the start times, the
CPU times and the resident sizes at once; after the CPU window only the ranks' trees are
read again. psutil took ~4x the CPU (~25 ms against ~6 ms on a host of 175 processes,
more than half of it its import), and status is called again and again on a busy node.
GPU memory comes from NVML through the same inventory reader as the preflight
(SAFELAUNCH_GPU_INVENTORY stands in for it in tests).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from safelaunch.gpu_inventory import read_inventory
from safelaunch.status.model import Usage

CPU_WINDOW = 0.25  # seconds over which CPU% is measured
SAME_PROCESS = 5.0  # s: a pid started further than this from the rank's spawn is reused
PROC = "/proc"


@dataclass(frozen=True, slots=True)
class _Sample:
    """One process as /proc/<pid>/stat shows it."""

    parent: int
    cpu_ticks: int  # user + system
    started_ticks: int  # after boot
    rss_pages: int


def _sample(pid: int) -> _Sample | None:
    """None when the process is gone (or unreadable)."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as stat:
            raw = stat.read()
    except OSError:
        return None
    # the command name, in parentheses, may hold spaces and parentheses itself
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return _Sample(
            parent=int(fields[1]),
            cpu_ticks=int(fields[11]) + int(fields[12]),
            started_ticks=int(fields[19]),
            rss_pages=int(fields[21]),
        )
    except (IndexError, ValueError):
        return None


def _everyone() -> dict[int, _Sample]:
    """Every process on the host: one look at /proc for all the ranks."""
    try:
        names = os.listdir(PROC)
    except OSError:
        return {}
    found = {}
    for name in names:
        if name.isdigit() and (sample := _sample(int(name))) is not None:
            found[int(name)] = sample
    return found


def _boot_time() -> float | None:
    try:
        with open(f"{PROC}/stat", "rb") as stat:
            for line in stat:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reused(own: _Sample, spawned_at: float | None, booted: float | None) -> bool:
    """The pid names another process than the rank the launcher spawned."""
    if spawned_at is None or booted is None:
        return False
    started = booted + own.started_ticks / os.sysconf("SC_CLK_TCK")
    return abs(started - spawned_at) > SAME_PROCESS


def _trees(
    wanted: Mapping[int, float | None], processes: Mapping[int, _Sample]
) -> dict[int, list[int]]:
    """Each rank's pid and its descendants' pids; a rank whose pid was reused left out."""
    booted = _boot_time()
    kids: dict[int, list[int]] = {}
    for pid, sample in processes.items():
        kids.setdefault(sample.parent, []).append(pid)
    trees = {}
    for pid, spawned_at in wanted.items():
        own = processes.get(pid)
        if own is None:
            continue
        if _reused(own, spawned_at, booted):
            continue
        tree, todo = [pid], list(kids.get(pid, ()))
        while todo:
            child = todo.pop()
            tree.append(child)
            todo.extend(kids.get(child, ()))
        trees[pid] = tree
    return trees


def _gpu_memory(environ: Mapping[str, str]) -> dict[int, int]:
    """MiB of GPU memory per pid, summed over GPUs; empty without NVML."""
    used: dict[int, int] = {}
    for gpu in read_inventory(environ).gpus:
        for process in gpu.processes:
            used[process.pid] = used.get(process.pid, 0) + process.memory_mib
    return used


def measure(
    ranks: Iterable[tuple[int, float | None]], environ: Mapping[str, str] | None = None
) -> dict[int, Usage]:
    """Usage per rank pid, for (pid, spawned_at) pairs of ranks said to run on this host."""
    wanted = dict(ranks)
    if not wanted:
        return {}
    started = time.monotonic()
    before = _everyone()
    trees = _trees(wanted, before)
    if not trees:
        return {}
    gpu = _gpu_memory(os.environ if environ is None else environ)  # inside the window
    time.sleep(max(0.0, CPU_WINDOW - (time.monotonic() - started)))
    after = {pid: _sample(pid) for tree in trees.values() for pid in tree}
    window = time.monotonic() - started
    ticks, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    usage = {}
    for pid, tree in trees.items():
        # a process that ended inside the window (or whose pid was reused) counts for neither
        alive = [
            (before[p], now)
            for p in tree
            if (now := after.get(p)) is not None and now.started_ticks == before[p].started_ticks
        ]
        cpu = sum(now.cpu_ticks - then.cpu_ticks for then, now in alive) / ticks / window
        memory = [gpu[p] for p in tree if p in gpu]
        usage[pid] = Usage(
            cpu_percent=round(100 * cpu, 1),
            rss_bytes=sum(now.rss_pages for _, now in alive) * page,
            gpu_mib=sum(memory) if memory else None,
        )
    return usage
