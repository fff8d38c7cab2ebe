"""What a rank that waits on its own children waits for: where its child is.

"rank 1 is in select" says nothing; "rank 1 waits for its DataLoader worker (pid 812),
which is in __getitem__ at data.py:41" names the line to read. Pure: the frames come
from the dumps hangs/child_stacks.py took.
"""

from __future__ import annotations

from collections.abc import Sequence

from safelaunch.diagnose.frames import LIBRARY_PARTS
from safelaunch.hangs.detection import ChildProcess

Frames = tuple[tuple[str, int, str], ...]

# Where a rank's main thread sits while it waits for a child process: a queue, a pipe,
# a condition, a select loop, the DataLoader's own wait for its workers.
_WAITS = (
    "multiprocessing/",
    "/queue.py",
    "/threading.py",
    "/selectors.py",
    "/subprocess.py",
    "/socket.py",
    "torch/utils/data/",
)
_WORKER = "torch/utils/data/_utils/worker.py"
_NOT_USERS = (*LIBRARY_PARTS, "<string>", "safelaunch/rank/")


def _user(frames: Frames) -> tuple[str, int, str] | None:
    return next((f for f in frames if not any(p in f[0] for p in _NOT_USERS)), None)


def _kind(frames: Frames) -> str:
    return "DataLoader worker" if any(_WORKER in f[0] for f in frames) else "child process"


def _pids(kind: str, pids: list[int]) -> str:
    if len(pids) == 1:
        return f"its {kind} (pid {pids[0]})"
    plural = f"{kind}es" if kind.endswith("s") else f"{kind}s"
    return f"its {plural} (pids {', '.join(map(str, pids))})"


def waits_for(frames: Frames, children: Sequence[tuple[ChildProcess, Frames]]) -> str | None:
    """`waits for its DataLoader worker (pid N), which is in __getitem__ at data.py:41`, or
    None: the rank is not waiting (its innermost frame is no wait), or no child is busy in
    the user's code and none is a plain subprocess."""
    if not frames or not children or not any(p in frames[0][0] for p in _WAITS):
        return None
    places: dict[tuple[str, str, str], list[int]] = {}
    for child, child_frames in children:
        found = _user(child_frames)
        if found is not None:
            path, line, func = found
            places.setdefault((_kind(child_frames), func, f"{path}:{line}"), []).append(child.pid)
    if places:
        parts = []
        for (kind, func, where), pids in places.items():
            verb = "is" if len(pids) == 1 else "are"
            parts.append(f"{_pids(kind, pids)}, which {verb} in {func} at {where}")
        return "waits for " + "; and for ".join(parts)
    plain = [c for c, f in children if c.dump is None and not f]
    if plain and any(p in frames[0][0] for p in ("/subprocess.py", "/selectors.py")):
        shown = ", ".join(f"pid {c.pid}: {c.command}" for c in plain)
        return f"waits for its child process ({shown})"
    return None
