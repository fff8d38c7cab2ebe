"""Shared reading of stack frames and of torch's rank marker (the user's own innermost frame:
safelaunch/userframe.py, re-exported here)."""

from __future__ import annotations

import re

from safelaunch.userframe import LIBRARY_PARTS as LIBRARY_PARTS
from safelaunch.userframe import user_frame as user_frame

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
