"""Shared reading of stack frames: torch's rank marker, and the user's own innermost frame."""

from __future__ import annotations

import re
from collections.abc import Sequence

# A traceback's frame line, and faulthandler's form of it (no comma before "in").
TRACEBACK_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
DUMP_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<func>.+)$')
# torch's prefix after init_process_group (`[rank3]:`), and safelaunch's own multi-node
# console prefix (`[node1/rank3]:`, `[node1/rank 3]:` when widths differ).
RANK_MARKER = re.compile(r"^\[(?:node\d+/)?rank\s*\d+\]:\s?")
# A console line of a combined log (a SLURM .out): safelaunch's `[rank3]:` and
# `[node1/rank3]:`, torchrun's role prefix `[default0]:` (a local rank).
# Bounded repeats: `[\w-]*?(\d+)` backtracks cubically on a long `[rank111...` line.
LINE_PREFIX = re.compile(
    r"^\[(?:node(?P<node>\d{1,9})/rank\s{0,4}|rank\s{0,4}|[A-Za-z_][\w-]{0,64}?)"
    r"(?P<rank>\d{1,9})\]:\s?(?P<text>.*)$"
)
# Installed libraries, and safelaunch's own in-rank wrappers (an editable install
# is outside site-packages): never the user's code.
LIBRARY_PARTS = ("site-packages", "dist-packages", "/lib/python", "<frozen", "safelaunch/rank/")


def user_frame(
    innermost_first: Sequence[tuple[str, object, str]],
    *,
    also_skip: tuple[str, ...] = (),
    fallback: bool = False,
) -> str | None:
    """The innermost frame outside installed libraries as `path:line in func`.

    With `fallback`, the innermost frame when none is the user's; else None.
    """
    skip = LIBRARY_PARTS + also_skip
    for path, line, function in innermost_first:
        if not any(part in path for part in skip):
            return f"{path}:{line} in {function}"
    if fallback and innermost_first:
        path, line, function = innermost_first[0]
        return f"{path}:{line} in {function}"
    return None
