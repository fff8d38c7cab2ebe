"""Process trees from /proc, pass after pass, reading only what can be in them.

The launcher looks at its ranks' trees every 0.5 s (hangs/activity.py) and its keeper at
the launcher's whole tree as often (supervisor/keeper.py). Finding a tree by parent
chain means knowing every process's parent, and reading every process's stat cost ~10-20
us a process a pass: what grew with the machine rather than the job (16 launchers and
their keepers on one machine read each other's processes: docs/scale.md). A process
outside a tree stays outside (a process enters a tree only by being forked in it, under
a new pid; an orphan of the tree goes to the launcher, a subreaper, inside it), so after
the first pass only the trees' processes and the new ones are read.

A process is known to be outside only when its parent chain, read in full, reaches the
top (pid 0) or a process known to be outside: a parent that ended during the pass leaves
a gap (its child may be on its way to the launcher, the subreaper), and such a process is
read again at the next pass. A pid is forgotten as soon as a listing lacks it: one reused
between two listings would need the kernel to go round all its pids in that time, and a
pass FORGET_AFTER seconds after the last one reads everything again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Generic, TypeVar

_T = TypeVar("_T")


class TreeScan(Generic[_T]):
    """The processes below some roots, the roots included, from `read(pid)`: (its parent,
    what the caller keeps of it), or None when it is gone or not to be counted."""

    FORGET_AFTER = 30.0

    def __init__(
        self,
        read: Callable[[int], tuple[int, _T] | None],
        listing: Callable[[], list[int]] | None = None,
    ) -> None:
        self._read = read
        self._listing = listing or _proc_pids
        self._outside: set[int] = set()
        self._roots: frozenset[int] = frozenset()
        self._last = float("-inf")

    def scan(self, roots: Collection[int], now: float) -> dict[int, tuple[int, _T]]:
        """pid -> (parent, what `read` gave) for every root and descendant; `now` monotonic."""
        if frozenset(roots) != self._roots or now - self._last > self.FORGET_AFTER:
            self._outside.clear()  # other roots, or a long pause: look at everything again
        self._roots, self._last = frozenset(roots), now
        listed = self._listing()
        found: dict[int, tuple[int, _T]] = {}
        for pid in listed:
            if pid not in self._outside and (got := self._read(pid)) is not None:
                found[pid] = got
        tops = [root for root in roots if root in found]
        inside = {*tops, *reach(found, tops)}
        settled: dict[int, bool] = {}
        newly = {pid for pid in found.keys() - inside if self._settled(pid, found, settled)}
        self._outside = self._outside.intersection(listed) | newly
        return {pid: found[pid] for pid in inside}

    def _settled(self, pid: int, found: dict[int, tuple[int, _T]], memo: dict[int, bool]) -> bool:
        """pid's parent chain reaches the top or a known outsider with no gap (see above)."""
        chain = []
        while True:
            if pid in memo:
                known = memo[pid]
                break
            if pid == 0 or pid in self._outside:
                known = True
                break
            got = found.get(pid)
            if got is None:
                known = False  # a parent that ended during the pass
                break
            chain.append(pid)
            pid = got[0]
        for each in chain:
            memo[each] = known
        return known

    def outside(self, pid: int) -> bool:
        """Known at the last pass to be outside every tree."""
        return pid in self._outside


def _proc_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def reach(tree: Mapping[int, tuple[int, object]], tops: Iterable[int]) -> list[int]:
    """Every descendant of `tops` by the parents in `tree` (pid -> (parent, anything): a
    scan's result, or one pass's), `tops` not included."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in tree.items():
        children.setdefault(parent, []).append(pid)
    found: list[int] = []
    seen: set[int] = set()  # each once: a pid reused while /proc was listed can close a loop
    stack = [child for top in tops for child in children.get(top, ())]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found
