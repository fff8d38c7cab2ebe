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
from typing import Any

from safelaunch.diagnose import collectives
from safelaunch.diagnose.errortext import last_lines
from safelaunch.diagnose.frames import LINE_PREFIX
from safelaunch.diagnose.leaving import Leave, describe_leave, leave_from_record
from safelaunch.diagnose.match import non_finite_loss
from safelaunch.diagnose.reading import inside, read_combined, read_stream, read_tail, walk
from safelaunch.diagnose.rootcause import RankEvidence, RootCause, find_root_cause
from safelaunch.diagnose.signatures import SIGNATURES, Signature
from safelaunch.errors import SafelaunchError

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
_RANK_FILE = re.compile(r"^rank(\d+)\.log$")


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


def _report(attempt: Path) -> dict[str, Any]:
    try:
        record = json.loads(read_tail(attempt / "report.json", REPORT_LIMIT))
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _ended(entry: dict[str, Any]) -> tuple[bool | None, int | None, int | None]:
    """(failed, exit code, signal) of one rank in report.json."""
    name = str(entry.get("signal"))
    signum = int(signal.Signals[name]) if name in signal.Signals.__members__ else None
    state = entry.get("state")
    code = entry.get("exit_code")
    if state == "failed":
        return True, code, signum
    if state == "succeeded":
        return False, 0, None
    return False, None, signum  # stopped by safelaunch, not started


def _safelaunch(directory: Path) -> LogSet | None:
    latest = directory / "latest"
    if latest.is_dir() and inside(directory, latest):  # never a link out of the tree
        directory = latest.resolve()
    attempts = _numbered(directory, "attempt_")
    attempt = attempts[-1] if attempts else directory
    logs = _numbered(attempt, "rank", ".log")
    if not logs:
        return None
    report = _report(attempt)
    entries = {e.get("rank"): e for e in report.get("ranks", []) if isinstance(e, dict)}
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


def _torchrun_codes(launcher: str) -> dict[int, int]:
    """Exit codes torchrun printed: its Failures/Root Cause blocks and agent lines.

    -15 (SIGTERM) is torchrun stopping the other ranks after the first failure: left out.
    """
    codes = {int(local): int(code) for code, local in _TORCHRUN_EXIT.findall(launcher)}
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
    """Cut a combined log into ranks by their line prefixes.

    Unprefixed lines are the launcher's own, or a rank's output when torchrun ran
    without --tee: those go to the rank torchrun names as its root cause (or, for one
    rank's own log file, to that rank).
    """
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
    joined = "\n".join(launcher)
    root = _TORCHRUN_ROOT.search(joined)
    hint = int(root[1]) if root else None
    codes = _torchrun_codes(joined)
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
            text="\n".join(lines.get(rank, [])) + "\n",
            signum=_signal_of(codes.get(rank)),
            order=float(first_seen.get(rank, len(text))),
            code=codes.get(rank),
            failed=True if codes.get(rank) else None,
            node=nodes.get(rank),
        )
        for rank in sorted(set(lines) | set(codes))  # a killed rank may have printed nothing
    )
    return LogSet(layout="combined log", ranks=ranks, root_hint=hint, hosts=hosts)


def load(where: str) -> LogSet:
    """Find the logs at a path (or on stdin for `-`)."""
    if where == "-":
        return split_combined(read_stream(sys.stdin.buffer))
    path = Path(where)
    if path.is_file():
        text = read_combined(path)
        if text is None:
            raise ExplainError(f"{where}: cannot be read", "give a readable log file")
        named = _RANK_FILE.match(path.name)
        logs = split_combined(text, int(named[1]) if named else None)
        if named:  # one rank's own log from a run directory
            return LogSet(layout=f"one rank's log ({path.name})", ranks=logs.ranks)
        return logs
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
    """The explanation: the root cause and what the knowledge base says of it."""

    root: RootCause | None
    log: RankLog | None  # the root cause's log
    non_finite: tuple[tuple[int, str], ...]
    status: str | None = None  # safelaunch's own: succeeded, hung, interrupted, failed


def _failed(rank: RankLog) -> bool:
    if rank.failed is not None:
        return rank.failed
    return "Traceback (most recent" in rank.text or bool(rank.signum)


def evidence(logs: LogSet, table: Sequence[Signature]) -> list[RankEvidence]:
    """The ranks as the one root-cause rule sees them (the live path builds the same)."""
    from safelaunch.diagnose.match import matches

    return [
        RankEvidence(
            rank=r.rank,
            text=r.text,
            failed=_failed(r) or (r.failed is None and bool(matches(r.text, r.signum, table))),
            ended=r.order,
            code=r.code,
            signum=r.signum,
            leave=r.leave,
        )
        for r in logs.ranks
    ]


def judge(logs: LogSet, table: Sequence[Signature] = SIGNATURES) -> Verdict:
    """The same rule as the live run: find_root_cause over every rank's evidence."""
    non_finite = tuple((r.rank, line) for r in logs.ranks if (line := non_finite_loss(r.text)))
    status = logs.report.get("status")
    if status in ("succeeded", "hung", "interrupted"):
        return Verdict(root=None, log=None, non_finite=non_finite, status=status)
    root = find_root_cause(evidence(logs, table), table, logs.root_hint)
    log = next((r for r in logs.ranks if root is not None and r.rank == root.rank), None)
    return Verdict(root=root, log=log, non_finite=non_finite, status=status)


def _hang_lines(report: dict[str, Any]) -> list[str]:
    """The hang verdict the launcher drew (its heartbeats are gone; report.json keeps it)."""
    hang = report["hang"]
    lines = [f"hung: no rank made progress for {hang.get('stuck_for_s')} s"]
    culprits = hang.get("culprits") or []
    groups = hang.get("groups", [])
    for group in groups:
        where = f" ({group['location']})" if group.get("location") else ""
        ranks = ",".join(map(str, group.get("ranks", [])))
        lines.append(f"  ranks {ranks}: in {group.get('activity')}{where}")
    if culprits:
        lines.append(f"root cause: rank {','.join(map(str, culprits))} (hang)")
        lines.append(f"  class: {(report.get('diagnosis') or {}).get('class')}")
        place = next(
            (g.get("location") for g in groups if set(g.get("ranks", [])) <= set(culprits)), None
        )
        if place:
            lines.append(f"  at:    {place}")
    lines.append(f"  {hang.get('reason')}")
    return lines


def _where(rank: RankLog, hosts: dict[int, str]) -> str:
    """` on node 1 (n2)` for a rank of a multi-node combined log; '' otherwise."""
    if rank.node is None:
        return ""
    host = hosts.get(rank.node)
    return f" on node {rank.node}" + (f" ({host})" if host else "")


def _root_lines(verdict: Verdict, hosts: dict[int, str]) -> list[str]:
    root, log = verdict.root, verdict.log
    if root is None:
        return ["no failure found in these logs"]
    signature = root.signature
    klass = (
        f"{signature.klass} ({signature.id}): {signature.meaning}"
        if signature
        else "unknown: no known signature; the error below is the lead"
    )
    where = _where(log, hosts) if log is not None else ""
    lines = [f"root cause: rank {root.rank}{where}", f"  class: {klass}"]
    if root.left_early and log is not None:
        lines.extend(f"  {line}" for line in describe_leave(log.leave, {}, root.rank))
    if root.error is not None:
        lines.append(f"  error: {root.error.line}")
        if root.error.location:
            lines.append(f"  at:    {root.error.location}")
    elif root.evidence:
        lines.append(f"  error: {root.evidence}")
    elif log is not None:
        ending = last_lines(log.text)
        lines.append(
            "  error: none in its log; its last lines:" if ending else "  error: its log is empty"
        )
        lines.extend(f"  | {line}" for line in ending)
    lines.extend(f"  next:  {step}" for step in (signature.next_steps if signature else ()))
    if log is not None and log.path is not None:
        lines.append(f"  log:   {log.path}")
    lines.extend(
        f"  rank {rank}: failed as a consequence ({sid}), not a cause"
        for rank, sid in root.consequences
    )
    return lines


def render(where: str, logs: LogSet, verdict: Verdict) -> str:
    """The explanation for a person."""
    lines = [f"{where}: {logs.layout}, {len(logs.ranks)} rank log(s)"]
    report = logs.report
    if verdict.status == "succeeded":
        lines.append(f"succeeded: all {len(logs.ranks)} ranks exited 0")
    elif verdict.status == "hung" and isinstance(report.get("hang"), dict):
        lines.extend(_hang_lines(report))
    elif verdict.status == "interrupted":
        lines.append(f"interrupted (exit code {report.get('exit_code')}): no rank failed first")
    elif verdict.root is None and report.get("stopped_by_node"):
        lines.append(f"stopped: {report['stopped_by_node']}")
    else:
        lines.extend(_root_lines(verdict, logs.hosts))
    if report.get("exit_code") is not None:
        lines.append(f"exit code {report['exit_code']} (as the launcher exited)")
    lines.extend(
        f"note: rank {rank} logged a non-finite loss: {line!r}" for rank, line in verdict.non_finite
    )
    return "\n".join(lines)


def explain(where: str, table: Sequence[Signature] = SIGNATURES) -> str:
    """Load, judge, render."""
    logs = load(where)
    flight = collectives.explain_lines(Path(where)) if where != "-" else []
    return "\n".join([render(where, logs, judge(logs, table)), *flight])
