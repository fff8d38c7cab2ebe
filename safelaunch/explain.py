"""`safelaunch explain PATH|-`: a verdict on logs safelaunch did not necessarily produce.

Layouts: a safelaunch log, run or attempt directory (rankK.log); a torchrun log or run
directory (attempt_N/<local_rank>/{stdout,stderr}.log); a single combined log, such as a
SLURM .out file, whose rank lines carry `[rankN]:`, safelaunch's multi-node `[node1/rank3]:`
or torchrun's `[default0]:` prefix.
Lines without a prefix are the launcher's own (torchrun's ChildFailedError traceback):
never a rank's error, but torchrun's "Root Cause" block names the failed rank and code.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from safelaunch.diagnose import collectives, from_log
from safelaunch.diagnose.frames import LINE_PREFIX
from safelaunch.diagnose.match import Match, cause, matches, non_finite_loss
from safelaunch.diagnose.reading import inside, read_combined, read_stream, read_tail, walk
from safelaunch.diagnose.signatures import SIGNATURES, Signature
from safelaunch.errors import SafelaunchError

# safelaunch's own line on each node of a multi-node job: which host is node N
_NODE_HOST = re.compile(r"^safelaunch: node (\d+) of \d+ \(([^)]*)\)")
REPORT_LIMIT = 4 << 20  # report.json: a few KiB per rank
# Bounded: `.*?` from every "Root Cause" to the end of a huge launcher log is quadratic.
_TORCHRUN_ROOT = re.compile(
    r"Root Cause.{0,4096}?rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", re.S
)


class ExplainError(SafelaunchError):
    """A path that holds no logs explain can read."""

    exit_code = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class RankLog:
    """What one rank wrote, and how it ended when the layout tells."""

    rank: int
    path: Path | None
    text: str
    signum: int | None = None
    order: int = 0  # where its first line appears in a combined log (earlier = sooner)
    node: int | None = None  # a multi-node combined log: the node the rank ran on


@dataclass(frozen=True, slots=True, kw_only=True)
class LogSet:
    """The logs found at PATH."""

    layout: str
    ranks: tuple[RankLog, ...]
    root_hint: int | None = None  # the launcher's own verdict, where it left one
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


def _safelaunch(directory: Path) -> LogSet | None:
    latest = directory / "latest"
    if latest.is_dir() and inside(directory, latest):  # never a link out of the tree
        directory = latest.resolve()
    attempts = _numbered(directory, "attempt_")
    attempt = attempts[-1] if attempts else directory
    logs = _numbered(attempt, "rank", ".log")
    if not logs:
        return None
    signals: dict[int, int] = {}
    try:
        for entry in json.loads(read_tail(attempt / "report.json", REPORT_LIMIT))["ranks"]:
            if entry.get("signal"):
                signals[int(entry["rank"])] = int(signal.Signals[entry["signal"]])
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    ranks = tuple(
        RankLog(
            rank=int(p.stem[4:]), path=p, text=read_tail(p), signum=signals.get(int(p.stem[4:]))
        )
        for p in logs
    )
    return LogSet(layout=f"safelaunch ({attempt.name})", ranks=ranks)


def _torchrun(directory: Path) -> LogSet | None:
    found = {
        p.parent.parent
        for p in walk(directory)
        if p.name == "stdout.log"
        and p.parent.parent.name.startswith("attempt_")
        and p.parent.parent.name[8:].isdigit()
        and p.parent.parent.name[8:].isascii()
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


def split_combined(text: str) -> LogSet:
    """Cut a combined log into ranks by their line prefixes."""
    lines: dict[int, list[str]] = {}
    first_seen: dict[int, int] = {}
    nodes: dict[int, int] = {}
    hosts: dict[int, str] = {}
    launcher: list[str] = []
    for number, line in enumerate(text.splitlines()):
        match = LINE_PREFIX.match(line)
        if match is None:
            launcher.append(line)
            if placed := _NODE_HOST.match(line):
                hosts[int(placed[1])] = placed[2]
            continue
        rank = int(match["rank"])
        lines.setdefault(rank, []).append(match["text"])
        first_seen.setdefault(rank, number)
        if match["node"] is not None:
            nodes.setdefault(rank, int(match["node"]))
    root = _TORCHRUN_ROOT.search("\n".join(launcher))
    codes = {int(root[1]): int(root[2])} if root else {}
    ranks = tuple(
        RankLog(
            rank=rank,
            path=None,
            text="\n".join(lines[rank]) + "\n",
            signum=_signal_of(codes.get(rank)),
            order=first_seen[rank],
            node=nodes.get(rank),
        )
        for rank in sorted(lines)
    )
    return LogSet(
        layout="combined log",
        ranks=ranks,
        root_hint=int(root[1]) if root else None,
        hosts=hosts,
    )


def load(where: str) -> LogSet:
    """Find the logs at a path (or on stdin for `-`)."""
    if where == "-":
        return split_combined(read_stream(sys.stdin.buffer))
    path = Path(where)
    if path.is_file():
        text = read_combined(path)
        if text is None:
            raise ExplainError(f"{where}: cannot be read", "give a readable log file")
        return split_combined(text)
    if path.exists() and not path.is_dir():
        raise ExplainError(f"{where}: not a regular file or a directory", "give a log file")
    if path.is_dir():
        found = _safelaunch(path) or _torchrun(path)
        if found:
            return found
        raise ExplainError(
            f"{where}: no rankK.log nor attempt_N/<rank>/stdout.log below it",
            "give a safelaunch or torchrun log directory, or one combined log file",
        )
    raise ExplainError(f"{where}: no such file or directory", "give a log file, a directory or -")


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The explanation: the root cause rank and what the knowledge base says of it."""

    root: RankLog | None
    match: Match | None
    consequences: tuple[tuple[int, str], ...]
    non_finite: tuple[tuple[int, str], ...]


def judge(logs: LogSet, table: Sequence[Signature] = SIGNATURES) -> Verdict:
    """Pick the root cause: a rank whose error is not only a consequence of another's."""
    found = {r.rank: matches(r.text, r.signum, table) for r in logs.ranks}
    failed = [r for r in logs.ranks if found[r.rank] or "Traceback (most recent" in r.text]
    real = [r for r in failed if cause(found[r.rank]) is not None or not found[r.rank]]
    hinted = [r for r in real if r.rank == logs.root_hint]
    candidates = hinted or sorted(real or failed, key=lambda r: (r.order, r.rank))
    root = candidates[0] if candidates else None
    consequences = tuple(
        (r.rank, found[r.rank][0].signature.id)
        for r in failed
        if r is not root and found[r.rank] and cause(found[r.rank]) is None
    )
    non_finite = tuple((r.rank, line) for r in logs.ranks if (line := non_finite_loss(r.text)))
    return Verdict(
        root=root,
        match=cause(found[root.rank]) if root else None,
        consequences=consequences,
        non_finite=non_finite,
    )


def render(where: str, logs: LogSet, verdict: Verdict) -> str:
    """The explanation for a person."""
    lines = [f"{where}: {logs.layout}, {len(logs.ranks)} rank log(s)"]
    root = verdict.root
    if root is None:
        lines.append("no failure found in these logs")
    else:
        match = verdict.match
        signature = match.signature if match else None
        klass = (
            f"{signature.klass} ({signature.id}): {signature.meaning}"
            if signature
            else ("unknown: no known signature; the error below is the lead")
        )
        lines.append(f"root cause: rank {root.rank}{_where(root, logs.hosts)}")
        lines.append(f"  class: {klass}")
        error = from_log(root.path or Path("-"), root.text)
        if error is not None:
            lines.append(f"  error: {error.line}")
            if error.location:
                lines.append(f"  at:    {error.location}")
        elif match is not None and match.line:
            lines.append(f"  error: {match.line}")
        lines.extend(f"  next:  {step}" for step in (signature.next_steps if signature else ()))
        if root.path is not None:
            lines.append(f"  log:   {root.path}")
    lines.extend(
        f"  rank {rank}: failed as a consequence ({sid}), not a cause"
        for rank, sid in verdict.consequences
    )
    lines.extend(
        f"note: rank {rank} logged a non-finite loss: {line!r}" for rank, line in verdict.non_finite
    )
    return "\n".join(lines)


def _where(rank: RankLog, hosts: dict[int, str]) -> str:
    """` on node 1 (n2)` for a rank of a multi-node combined log; '' otherwise."""
    if rank.node is None:
        return ""
    host = hosts.get(rank.node)
    return f" on node {rank.node}" + (f" ({host})" if host else "")


def explain(where: str, table: Sequence[Signature] = SIGNATURES) -> str:
    """Load, judge, render."""
    logs = load(where)
    flight = collectives.explain_lines(Path(where)) if where != "-" else []
    return "\n".join([render(where, logs, judge(logs, table)), *flight])
