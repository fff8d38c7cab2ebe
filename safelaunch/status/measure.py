"""CPU, memory and GPU memory of the ranks running on this host, measured when asked.

psutil reads each rank's whole process tree (the rank and its children: DataLoader
workers count), which the launcher does not track; it is imported here only, never
on the launch path. GPU memory comes from NVML through the same inventory reader as
the preflight (SAFELAUNCH_GPU_INVENTORY stands in for it in tests).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Mapping

import psutil

from safelaunch.gpu_inventory import read_inventory
from safelaunch.status.model import Usage

CPU_WINDOW = 0.25  # seconds over which CPU% is measured
SAME_PROCESS = 5.0  # s: a pid started further than this from the rank's spawn is reused


def _children() -> dict[int, list[int]]:
    """Every process's children, by parent pid: one look at /proc for all the ranks.

    (psutil's children(recursive=True) looks at every process on the host per call:
    a look per rank grew with ranks x processes.)
    """
    kids: dict[int, list[int]] = {}
    for process in psutil.process_iter(["ppid"]):
        kids.setdefault(process.info["ppid"], []).append(process.pid)
    return kids


def _tree(
    pid: int, spawned_at: float | None, kids: Mapping[int, list[int]]
) -> list[psutil.Process]:
    """The rank's process and its descendants; empty when the pid is no longer the rank."""
    try:
        process = psutil.Process(pid)
        if spawned_at is not None and abs(process.create_time() - spawned_at) > SAME_PROCESS:
            return []
    except psutil.Error:
        return []
    tree, todo = [process], list(kids.get(pid, ()))
    while todo:
        child = todo.pop()
        with contextlib.suppress(psutil.Error):
            tree.append(psutil.Process(child))
            todo.extend(kids.get(child, ()))
    return tree


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
    kids = _children()
    trees = {pid: _tree(pid, spawned, kids) for pid, spawned in wanted.items()}
    trees = {pid: tree for pid, tree in trees.items() if tree}
    if not trees:
        return {}
    for tree in trees.values():
        for process in tree:
            with contextlib.suppress(psutil.Error):
                process.cpu_percent(None)  # the first call starts the window
    time.sleep(CPU_WINDOW)
    gpu = _gpu_memory(os.environ if environ is None else environ)
    usage = {}
    for pid, tree in trees.items():
        cpu = 0.0
        rss = 0
        for process in tree:
            with contextlib.suppress(psutil.Error):
                cpu += process.cpu_percent(None)
                rss += process.memory_info().rss
        memory = [gpu[p.pid] for p in tree if p.pid in gpu]
        usage[pid] = Usage(
            cpu_percent=round(cpu, 1), rss_bytes=rss, gpu_mib=sum(memory) if memory else None
        )
    return usage
