"""`safelaunch explain PATH|-`: a verdict on logs safelaunch did not necessarily produce.

diagnose/layouts.py finds the rank logs at PATH in whichever layout they are; here they
are judged by the same root-cause rule as a live run, and the verdict rendered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safelaunch.diagnose import collectives
from safelaunch.diagnose.errortext import last_lines
from safelaunch.diagnose.layouts import LogSet, RankLog, load
from safelaunch.diagnose.leaving import describe_leave
from safelaunch.diagnose.match import non_finite_loss
from safelaunch.diagnose.rootcause import RankEvidence, RootCause, find_root_cause
from safelaunch.diagnose.signatures import SIGNATURES, Signature


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
