"""The rank logs at a path, in any layout a run leaves: what `safelaunch explain` reads.

Layouts: a safelaunch log, run or attempt directory (rankK.log); a torchrun log or run
directory (attempt_N/<local_rank>/{stdout,stderr}.log); a single combined log, such as a
SLURM .out file, whose rank lines carry `[rankN]:`, safelaunch's multi-node `[node1/rank3]:`
or torchrun's `[default0]:` prefix, each perhaps after srun --label's `N: ` (prefixes.py).
Lines without a prefix are the launcher's own (torchrun's ChildFailedError traceback):
never a rank's error, but torchrun's "Root Cause" block names the failed rank and code.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safelaunch import exitcodes
from safelaunch.diagnose.jsonshape import (
    INT,
    OPT_INT,
    OPT_NUM,
    OPT_STR,
    STR,
    Arr,
    Kind,
    Map,
    Obj,
    Row,
    read_record,
)
from safelaunch.diagnose.leaving import Leave, leave_from_record
from safelaunch.diagnose.prefixes import read_lines
from safelaunch.diagnose.reading import inside, read_combined, read_stream, read_tail, walk
from safelaunch.errors import SafelaunchError
from safelaunch.outcome import RankEnding
from safelaunch.rundir import layout, rank_logs, report_file
from safelaunch.vocab import word_of

# safelaunch's own line on each node of a multi-node job: which host is node N
_NODE_HOST = re.compile(r"^safelaunch: node (\d+) of \d+ \(([^)]*)\)")
REPORT_LIMIT = 4 << 20  # report.json: a few KiB per rank
# torchrun's ChildFailedError block: "Root Cause" and "Failures", a rank and its exitcode each
_TORCHRUN_RANK = re.compile(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
# Bounded: `.*?` from every "Root Cause" to the end of a huge launcher log is quadratic.
_TORCHRUN_ROOT = re.compile(r"Root Cause.{0,4096}?rank\s*:\s*(\d+) \(local_rank", re.S)
# torchrun's agent line: "failed (exitcode: 1) local_rank: 1 (pid: 123) of binary"
_TORCHRUN_EXIT = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
_TORCHRUN_OWN = re.compile(r"torch\.distributed\.elastic|torch/distributed/(?:run|elastic)|^=+$")
_TORCHRUN_NAME = re.compile(r"torch\.distributed\.elastic|torch/distributed/(?:run|elastic)")
_RANK_FILE = re.compile(r"^rank(\d+)\.log$")


class NoLogs(SafelaunchError):
    """A path that holds no logs explain can read."""

    exit_code = exitcodes.USAGE


@dataclass(frozen=True, slots=True, kw_only=True)
class RankLog:
    """What one rank wrote, and how it ended when the layout tells."""

    rank: int
    path: Path | None
    text: str
    signum: int | None = None
    order: float | None = None  # when it ended, or where its first line is in a combined log
    code: int | None = None  # its exit code, when the layout tells
    failed: bool | None = None  # None: judge by its log
    leave: Leave | None = None
    node: int | None = None  # a multi-node combined log: the node the rank ran on


@dataclass(frozen=True, slots=True, kw_only=True)
class LogSet:
    """The logs found at PATH."""

    layout: str
    ranks: tuple[RankLog, ...]
    root_hint: int | None = None  # the launcher's own verdict, where it left one
    report: dict[str, Any] = field(default_factory=dict)  # safelaunch's report.json
    hosts: dict[int, str] = field(default_factory=dict)  # node -> host, where the log says


def _signal_of(code: int | None) -> int | None:
    return -code if code is not None and code < 0 else None


def _numbered(directory: Path, prefix: str, suffix: str = "") -> list[Path]:
    """`prefix<N><suffix>` entries of `directory` that stay inside it, by N."""
    found = []
    for path in walk(directory, depth=1):
        number = path.name.removeprefix(prefix).removesuffix(suffix)
        named = path.name.startswith(prefix) and path.name.endswith(suffix)
        if named and number.isascii() and number.isdigit() and inside(directory, path):
            found.append((int(number), path))
    return [path for _, path in sorted(found)]


# The fields of report.json that explain's readers use (here and in safelaunch/explain.py),
# as docs/report.schema.json declares them; a report that departs from them is unreadable.
_LEAVE = Obj(
    {
        "how": OPT_STR,
        "code": Kind((int, str, type(None))),
        "location": OPT_STR,
        "seq": OPT_INT,
        "left_at": OPT_INT,
        "frames": Arr(Row((STR, INT, STR))),
    }
)
_GROUP = Obj({"ranks": Arr(INT), "activity": OPT_STR, "location": OPT_STR})
REPORT = Obj(
    {
        "status": OPT_STR,
        "exit_code": OPT_INT,
        "stopped_by_node": OPT_STR,
        "ranks": Arr(
            Obj(
                {
                    "rank": INT,
                    "state": OPT_STR,
                    "exit_code": OPT_INT,
                    "signal": OPT_STR,
                    "ended_after_s": OPT_NUM,
                }
            )
        ),
        "diagnosis": Obj(
            {
                "class": OPT_STR,
                "signature": OPT_STR,
                "summary": OPT_STR,
                "next_steps": Arr(STR),
                "leaves": Map(_LEAVE),
                "collectives": Map(OPT_INT),
            }
        ),
        "hang": Obj(
            {
                "stuck_for_s": OPT_NUM,
                "culprits": Arr(INT),
                "groups": Arr(_GROUP),
                "reason": OPT_STR,
            }
        ),
    }
)


def _report(attempt: Path) -> dict[str, Any]:
    """The attempt's report.json, its shape checked ({} when it wrote none)."""
    return read_record(report_file.report(attempt), REPORT, REPORT_LIMIT) or {}


def _ended(entry: dict[str, Any]) -> tuple[bool | None, int | None, int | None]:
    """(failed, exit code, signal) of one rank in report.json."""
    name = str(entry.get("signal"))
    signum = int(signal.Signals[name]) if name in signal.Signals.__members__ else None
    state = word_of(entry.get("state"), RankEnding)
    code = entry.get("exit_code")
    if state == RankEnding.FAILED:
        return True, code, signum
    if state == RankEnding.SUCCEEDED:
        return False, 0, None
    return False, None, signum  # stopped by safelaunch, not started


def _safelaunch(directory: Path) -> LogSet | None:
    latest = layout.latest(directory)
    # os.path: False, not an OSError, for a path past the system's limit (a deep PATH)
    if os.path.isdir(latest) and inside(directory, latest):  # never a link out of the tree
        directory = latest.resolve()
    attempts = _numbered(directory, layout.ATTEMPT_PREFIX)
    attempt = attempts[-1] if attempts else directory
    logs = _numbered(attempt, rank_logs.LOG_PREFIX, rank_logs.LOG_SUFFIX)
    if not logs:
        return None
    report = _report(attempt)
    entries = {e.get("rank"): e for e in report.get("ranks") or [] if isinstance(e, dict)}
    leaves = (report.get("diagnosis") or {}).get("leaves") or {}
    ranks = []
    for path in logs:
        rank = int(path.stem[4:])
        entry = entries.get(rank, {})
        failed, code, signum = _ended(entry) if entry else (None, None, None)
        leave = leaves.get(str(rank))
        ranks.append(
            RankLog(
                rank=rank,
                path=path,
                text=read_tail(path),
                signum=signum,
                order=entry.get("ended_after_s"),
                code=code,
                failed=failed,
                leave=leave_from_record(rank, leave) if isinstance(leave, dict) else None,
            )
        )
    return LogSet(layout=f"safelaunch ({attempt.name})", ranks=tuple(ranks), report=report)


def _torchrun(directory: Path) -> LogSet | None:
    found = {
        p.parent.parent
        for p in walk(directory)
        if p.name == "stdout.log"
        and layout.attempt_number(p.parent.parent.name) is not None  # torchrun's too
    }
    attempts = sorted(found, key=lambda p: int(p.name[8:]))
    if not attempts:
        return None
    ranks = []
    for rank_dir in walk(attempts[-1], depth=1):
        if not (rank_dir.name.isascii() and rank_dir.name.isdigit()):
            continue
        text = "".join(read_tail(rank_dir / name) for name in ("stdout.log", "stderr.log"))
        ranks.append(RankLog(rank=int(rank_dir.name), path=rank_dir / "stderr.log", text=text))
    return LogSet(layout=f"torchrun ({attempts[-1].name}, local ranks)", ranks=tuple(ranks))


def _torchrun_codes(launcher: str, local_base: int | None) -> dict[int, int]:
    """Exit codes torchrun printed: its Failures/Root Cause blocks (global ranks) and agent
    lines (local ranks: `local_base` is the node's first rank; None, not read).

    -15 (SIGTERM) is torchrun stopping the other ranks after the first failure: left out.
    """
    codes = {}
    if local_base is not None:
        codes = {
            local_base + int(local): int(code) for code, local in _TORCHRUN_EXIT.findall(launcher)
        }
    codes.update({int(rank): int(code) for rank, code in _TORCHRUN_RANK.findall(launcher)})
    return {rank: code for rank, code in codes.items() if code != -15}


def _rank_output(launcher: list[str]) -> str:
    """Unprefixed lines that are not torchrun's own (a rank's output without --tee).

    Dropped: torchrun's log lines, its own ChildFailedError traceback and the
    failure block after it (that block is read for exit codes, not as a rank's output).
    """
    kept: list[str] = []
    block: list[str] = []  # a traceback being read, until its exception line
    for line in launcher:
        if "ChildFailedError" in line and not block:
            break  # the rest is torchrun's failure report
        if line.startswith("Traceback (most recent"):
            block = [line]
            continue
        if block:
            block.append(line)
            if line[:1].isspace() or not line:
                continue
            if not any(_TORCHRUN_OWN.search(b) for b in block):
                kept.extend(block)
            elif "ChildFailedError" in line:
                break
            block = []
            continue
        if not _TORCHRUN_OWN.search(line):
            kept.append(line)
    kept.extend(block if not any(_TORCHRUN_OWN.search(b) for b in block) else [])
    return "\n".join(kept) + "\n"


def split_combined(text: str, default_rank: int | None = None) -> LogSet:
    """Cut a combined log into ranks by their line prefixes (diagnose/prefixes.py).

    Unprefixed lines are the launcher's own, or a rank's output when torchrun ran
    without --tee: those go to the rank torchrun names as its root cause (or, for one
    rank's own log file, to that rank).
    """
    lines: dict[int, list[str]] = {}
    first_seen: dict[int, int] = {}
    nodes: dict[int, int] = {}
    hosts: dict[int, str] = {}
    launcher: list[str] = []
    by_node: dict[int | None, list[str]] = {}  # launcher lines, by the node srun labels
    owned, per_node = read_lines(text, _launchers_own)
    for number, (rank, node, line) in enumerate(owned):
        if rank is None:
            launcher.append(line)
            by_node.setdefault(node, []).append(line)
            if placed := _NODE_HOST.match(line):
                hosts[int(placed[1])] = placed[2]
            continue
        if rank not in lines:
            lines[rank], first_seen[rank] = [], number
        lines[rank].append(line)
        if node is not None:
            nodes.setdefault(rank, node)
    joined = "\n".join(launcher)
    root = _TORCHRUN_ROOT.search(joined)
    hint = int(root[1]) if root else None
    codes = _codes(by_node, per_node)
    owner = hint if hint is not None else default_rank
    if owner is None and not lines and launcher:
        owner = 0  # one rank's log: every line is its own
    if owner is not None:
        loose = _rank_output(launcher)
        if loose.strip():
            lines[owner] = [*loose.splitlines(), *lines.get(owner, [])]
            first_seen.setdefault(owner, len(text))
    ranks = tuple(
        RankLog(
            rank=rank,
            path=None,
            text="\n".join(lines.pop(rank, [])) + "\n",  # each list let go once joined
            signum=_signal_of(codes.get(rank)),
            order=float(first_seen.get(rank, len(text))),
            code=codes.get(rank),
            failed=True if codes.get(rank) else None,
            node=nodes.get(rank),
        )
        for rank in sorted(set(lines) | set(codes))  # a killed rank may have printed nothing
    )
    return LogSet(layout="combined log", ranks=ranks, root_hint=hint, hosts=hosts)


def _launchers_own(line: str) -> bool:
    """A launcher's own line: safelaunch's messages, torchrun's log lines (not a frame of
    a rank's traceback through torch's elastic @record)."""
    if line.startswith("safelaunch: "):
        return True
    if "torch" not in line:  # most lines: one scan in C
        return False
    return not line[:1].isspace() and 'File "' not in line and bool(_TORCHRUN_NAME.search(line))


def _codes(by_node: dict[int | None, list[str]], per_node: int | None) -> dict[int, int]:
    """Exit codes torchrun printed; srun-labelled by node, its local ranks made global
    where the log shows how many ranks a node ran (else only the global ones are read)."""
    if set(by_node) <= {None}:
        return _torchrun_codes("\n".join(by_node.get(None, [])), 0)
    codes: dict[int, int] = {}
    for node, launcher in by_node.items():
        base = None if node is None or per_node is None else node * per_node
        codes.update(_torchrun_codes("\n".join(launcher), base))
    return codes


def _shown(where: str) -> str:
    """A path as one line of an error: escaped, and its middle cut when very long."""
    shown = where if where.isprintable() else repr(where)[1:-1]
    return shown if len(shown) <= 200 else f"{shown[:100]}...{shown[-60:]}"


def load(where: str) -> LogSet:
    """Find the logs at a path (or on stdin for `-`)."""
    if where == "-":
        return split_combined(read_stream(sys.stdin.buffer))
    path, shown = Path(where), _shown(where)
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        fix = "give a log file, a directory or -"
        raise NoLogs(f"{shown}: no such file or directory", fix) from None
    except (OSError, ValueError) as exc:  # too long for the system, not searchable, a NUL
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        fix = "give a log file, a directory or -"
        raise NoLogs(f"{shown}: cannot be read ({why})", fix) from None
    if stat.S_ISREG(mode):
        text = read_combined(path)
        if text is None:
            raise NoLogs(f"{shown}: cannot be read", "give a readable log file")
        named = _RANK_FILE.match(path.name)
        logs = split_combined(text, int(named[1]) if named else None)
        if named:  # one rank's own log from a run directory
            return LogSet(layout=f"one rank's log ({path.name})", ranks=logs.ranks)
        return logs
    if not stat.S_ISDIR(mode):
        raise NoLogs(f"{shown}: not a regular file or a directory", "give a log file")
    found = _safelaunch(path) or _torchrun(path)
    if found:
        return found
    raise NoLogs(
        f"{shown}: no rankK.log nor attempt_N/<rank>/stdout.log below it",
        "give a safelaunch or torchrun log directory, or one combined log file",
    )
