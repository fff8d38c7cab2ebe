"""`safelaunch explain PATH|-`: a verdict on logs safelaunch did not necessarily produce.

diagnose/layouts.py finds the rank logs at PATH in whichever layout they are; here they
are judged by the same root-cause rule as a live run, and the verdict rendered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safelaunch.cause import (
    CauseView,
    cause_lines,
    consequence_lines,
    known_class_line,
    next_lines,
)
from safelaunch.diagnose import witnesses
from safelaunch.diagnose.arbiter import Verdict, decide, verdict_lines
from safelaunch.diagnose.errortext import ErrorSource, last_lines
from safelaunch.diagnose.layouts import LogSet, RankLog, load
from safelaunch.diagnose.leaving import describe_leave
from safelaunch.diagnose.match import matches, non_finite_loss
from safelaunch.diagnose.rootcause import RankEvidence, RootCause, find_root_cause, follow_verdict
from safelaunch.diagnose.signatures import SIGNATURES, Signature
from safelaunch.exitcodes import signal_name
from safelaunch.flights import found
from safelaunch.flights.forensics import Forensics
from safelaunch.outcome import AttemptStatus
from safelaunch.ranktext import ranks_label
from safelaunch.vocab import word_of


@dataclass(frozen=True, slots=True, kw_only=True)
class LogVerdict:
    """The explanation: the root cause and what the knowledge base says of it."""

    root: RootCause | None
    log: RankLog | None  # the root cause's log
    non_finite: tuple[tuple[int, str], ...]
    status: AttemptStatus | None = None  # safelaunch's own verdict, where report.json has one
    verdict: Verdict | None = None  # the arbiter's, from what the logs and records show


def _failed(rank: RankLog) -> bool:
    if rank.failed is not None:
        return rank.failed
    return "Traceback (most recent" in rank.text or bool(rank.signum)


def evidence(logs: LogSet, matched: Mapping[int, Sequence[object]]) -> list[RankEvidence]:
    """The ranks as the one root-cause rule sees them (the live path builds the same);
    `matched`: each rank's signatures (a rank whose end is not known failed if it has any)."""
    return [
        RankEvidence(
            rank=r.rank,
            text=r.text,
            failed=_failed(r) or (r.failed is None and bool(matched.get(r.rank))),
            ended=r.order,
            code=r.code,
            signum=r.signum,
            leave=r.leave,
        )
        for r in logs.ranks
    ]


def judge(
    logs: LogSet, table: Sequence[Signature] = SIGNATURES, forensics: Forensics | None = None
) -> LogVerdict:
    """The same rules as the live run: find_root_cause over every rank's evidence, then
    the arbiter over what the logs and the flight records found show."""
    non_finite = tuple((r.rank, line) for r in logs.ranks if (line := non_finite_loss(r.text)))
    status = word_of(str(logs.report.get("status")), AttemptStatus)
    if status in (AttemptStatus.SUCCEEDED, AttemptStatus.HUNG, AttemptStatus.INTERRUPTED):
        return LogVerdict(root=None, log=None, non_finite=non_finite, status=status)
    # matched once: every rule below reads them (each pass was ~0.2 s of CPU on a 1 GB .out)
    matched = {r.rank: matches(r.text, r.signum, table) for r in logs.ranks}
    ranks = evidence(logs, matched)
    root = find_root_cause(ranks, table, logs.root_hint, matched)
    verdict = None
    if root is not None:
        items = [
            witnesses.first_failure(root),
            *witnesses.flight_items(forensics),
            *witnesses.error_text_items(
                {r.rank: r.text for r in logs.ranks}, [r.rank for r in logs.ranks]
            ),
        ]
        verdict = decide(items)
        root = follow_verdict(root, verdict, ranks, table, matched)
    log = next((r for r in logs.ranks if root is not None and r.rank == root.rank), None)
    return LogVerdict(root=root, log=log, non_finite=non_finite, status=status, verdict=verdict)


def _hang_lines(report: dict[str, Any]) -> list[str]:
    """The hang verdict the launcher drew (its heartbeats are gone; report.json keeps it)."""
    hang = report["hang"]
    lines = [f"hung: no rank made progress for {hang.get('stuck_for_s')} s"]
    culprits = hang.get("culprits") or []
    groups = hang.get("groups", [])
    for group in groups:
        where = f" ({group['location']})" if group.get("location") else ""
        ranks = ranks_label(group.get("ranks", []))
        lines.append(f"  {ranks}: in {group.get('activity')}{where}")
    diagnosis = report.get("diagnosis")
    diagnosis = diagnosis if isinstance(diagnosis, dict) else {}
    signature, summary = diagnosis.get("signature"), diagnosis.get("summary")
    if culprits:
        lines.append(f"root cause: {ranks_label(culprits)} (hang)")
        klass = str(diagnosis.get("class"))
        known = signature and summary
        lines.append(
            known_class_line(klass, str(signature), str(summary)) if known else f"  class: {klass}"
        )
        place = next(
            (g.get("location") for g in groups if set(g.get("ranks", [])) <= set(culprits)), None
        )
        if place:
            lines.append(f"  at:    {place}")
    lines.append(f"  {hang.get('reason')}")
    # a hang whose cause is known (uneven loops: data/sampling) has next steps, as live
    steps = diagnosis.get("next_steps") if signature else None
    if isinstance(steps, list):
        lines.extend(next_lines(step for step in steps if isinstance(step, str)))
    return lines


def _where(rank: RankLog, hosts: dict[int, str]) -> str:
    """` on node 1 (n2)` for a rank of a multi-node combined log; '' otherwise."""
    if rank.node is None:
        return ""
    host = hosts.get(rank.node)
    return f" on node {rank.node}" + (f" ({host})" if host else "")


def _how(log: RankLog | None) -> str:
    """How the rank ended, as far as its logs tell (the live summary knows it for sure)."""
    if log is not None and log.signum:
        return f"died of {signal_name(log.signum)}"
    if log is not None and log.code is not None:
        return f"exited with code {log.code}"
    return "ended"


def _seqs(report: dict[str, Any]) -> dict[int, int]:
    """Each rank's collective count where the run recorded it (a rank that left early)."""
    recorded = (report.get("diagnosis") or {}).get("collectives") or {}
    if not isinstance(recorded, dict):
        return {}
    return {
        int(rank): seq
        for rank, seq in recorded.items()
        if str(rank).isdigit() and isinstance(seq, int) and not isinstance(seq, bool)
    }


def _root_lines(verdict: LogVerdict, hosts: dict[int, str], seqs: dict[int, int]) -> list[str]:
    """The root cause, rendered by the same cause_lines as the live summary."""
    root, log = verdict.root, verdict.log
    if root is None:
        return ["no failure found in these logs"]
    where = _where(log, hosts) if log is not None else ""
    leave = log.leave if log is not None else None
    view = CauseView(
        klass=root.klass,
        signature=root.signature,
        error=root.error,
        evidence=root.evidence,
        last_lines=tuple(last_lines(log.text)) if root.error is None and log is not None else (),
        how=_how(log),
        leave_lines=tuple(describe_leave(leave, seqs, root.rank)) if root.left_early else (),
        crashed_at_exit=root.crashed_at_exit,
        log=str(log.path) if log is not None and log.path is not None else None,
        seen=root.seen,
    )
    lines = [f"root cause: rank {root.rank}{where}", *cause_lines(view)]
    anchored = root.error is not None and root.error.source == ErrorSource.EVIDENCE
    lines.extend(verdict_lines(verdict.verdict, anchored=anchored))
    lines.extend(consequence_lines(root.consequences))
    return lines


def render(where: str, logs: LogSet, verdict: LogVerdict) -> str:
    """The explanation for a person."""
    lines = [f"{where}: {logs.layout}, {len(logs.ranks)} rank log(s)"]
    report = logs.report
    if verdict.status == AttemptStatus.SUCCEEDED:
        lines.append(f"succeeded: all {len(logs.ranks)} ranks exited 0")
    elif verdict.status == AttemptStatus.HUNG and isinstance(report.get("hang"), dict):
        lines.extend(_hang_lines(report))
    elif verdict.status == AttemptStatus.INTERRUPTED:
        lines.append(f"interrupted (exit code {report.get('exit_code')}): no rank failed first")
    elif verdict.root is None and report.get("stopped_by_node"):
        lines.append(f"stopped: {report['stopped_by_node']}")
    else:
        lines.extend(_root_lines(verdict, logs.hosts, _seqs(report)))
    if report.get("exit_code") is not None:
        lines.append(f"exit code {report['exit_code']} (as the launcher exited)")
    lines.extend(
        f"note: rank {rank} logged a non-finite loss: {line!r}" for rank, line in verdict.non_finite
    )
    return "\n".join(lines)


def explain(where: str, table: Sequence[Signature] = SIGNATURES) -> str:
    """Load, judge, render."""
    logs = load(where)
    forensics, files = found.found_under(Path(where)) if where != "-" else (None, 0)
    verdict = judge(logs, table, forensics)
    return "\n".join([render(where, logs, verdict), *found.explain_lines(forensics, files)])
