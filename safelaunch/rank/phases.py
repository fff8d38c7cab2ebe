"""Inside a rank: what a sampled main-thread stack is doing (data loading, compute, a collective).

Counted by the heartbeat sampler, so that a straggler's report can say where the rank
spends its time. A heuristic on frames, not a profiler: data loading is any frame in
torch.utils.data or a function whose name says it loads, reads, fetches or collates.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `re` and `typing` cost every rank at start; only a sample needs re
if TYPE_CHECKING:
    import re

DATA_WORDS = r"load|read|fetch|collate|__getitem__|__next__|__iter__"
_data_function: re.Pattern[str] | None = None  # compiled at the first sample
OWN = ("safelaunch/rank/", "<string>", "/torch/", "/threading.py", "/runpy.py")
LOCATIONS_KEPT = 32  # distinct places counted per phase (a bound on the record's size)

Frame = tuple[str, int, str]


def phase(frames: list[Frame]) -> str:
    """`collective`, `data` or `compute` for a main-thread stack (innermost first)."""
    if not frames:
        return "compute"
    if "torch/distributed/" in frames[0][0]:
        return "collective"
    for path, _, function in frames:
        if "torch/utils/data/" in path or _loads_data(function):
            return "data"
    return "compute"


def _loads_data(function: str) -> bool:
    """Does the function's name say it loads, reads, fetches or collates?"""
    global _data_function
    if _data_function is None:
        import re

        _data_function = re.compile(DATA_WORDS, re.I)
    return _data_function.search(function) is not None


def place(frames: list[Frame]) -> str | None:
    """The innermost frame in the user's own code: `file:line in function`."""
    for path, line, function in frames:
        if not any(part in path for part in OWN):
            return f"{path}:{line} in {function}"
    return None


class Phases:
    """Samples per phase, and per phase the places they were taken at."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.places: dict[str, dict[str, int]] = {}

    def add(self, frames: list[Frame]) -> None:
        kind = phase(frames)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        where = place(frames)
        if where is None:
            return
        seen = self.places.setdefault(kind, {})
        if where in seen or len(seen) < LOCATIONS_KEPT:
            seen[where] = seen.get(where, 0) + 1

    def snapshot(self) -> dict[str, object]:
        # Read from the main thread (a flight dump) while the heartbeat thread adds: each
        # copy is one C call, atomic under the GIL, where iterating a dict that grows raises.
        places = list(self.places.items())
        return {"counts": dict(self.counts), "places": {k: dict(v) for k, v in places}}
