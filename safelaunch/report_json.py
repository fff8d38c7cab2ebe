"""report.json: each attempt's machine-readable record (docs/report-json.md), and the
job's across nodes; the summary a person reads is report.py's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safelaunch.diagnose import Diagnosis, stragglers
from safelaunch.exitcodes import signal_name
from safelaunch.outcome import ENDED_DECIMALS, Outcome, RankResult
from safelaunch.report import exit_code
from safelaunch.rundir.writing import write_file
from safelaunch.vocab import UNKNOWN

if TYPE_CHECKING:  # only for multi-node jobs
    from safelaunch.diagnose.nodes import JobVerdict
    from safelaunch.rendezvous import Placement
# What only a failure's record uses is imported there: a job that succeeds never loads it
# (diagnose/__init__.py).
if TYPE_CHECKING:
    from safelaunch.flights.forensics import Forensics
    from safelaunch.hangs.analysis import HangAnalysis, Whereabouts
    from safelaunch.hangs.rhythm import Deadline

REPORT_SCHEMA = "safelaunch.report/1"  # docs/report-json.md; bump on incompatible change


def _rank_record(result: RankResult) -> dict[str, Any]:
    return {
        "rank": result.rank,
        "local_rank": result.local_rank,
        "pid": result.pid,
        "state": result.state,
        "exit_code": result.exit_code,
        "signal": signal_name(result.signal) if result.signal is not None else None,
        "ended_after_s": round(result.ended_after, ENDED_DECIMALS),
        "log": str(result.log_path),
    }


def _group_record(group: Whereabouts) -> dict[str, Any]:
    return {
        "ranks": list(group.ranks),
        "activity": group.activity,
        "location": group.location,
        "waiting_in_collective": group.waiting,
        "collectives": list(group.seqs),
        "frozen": group.frozen,
        "script_ended": group.ended,
        "children": group.children,
    }


def _survivors_record(outcome: Outcome, diagnosis: Diagnosis) -> dict[str, Any] | None:
    """report.json's `survivors`: where the other ranks were, groups shaped as a hang's."""
    if outcome.survivors is None:
        return None
    from safelaunch.rundir import stack_files

    return {
        "after": outcome.survivors.after,
        "failed_rank": outcome.survivors.failed_rank,
        "groups": [_group_record(g) for g in diagnosis.survivors],
        "unanswered": {str(r): why for r, why in outcome.survivors.evidence.unanswered.items()},
        "took_s": round(outcome.survivors.took, 3),
        "evidence": str(stack_files.failure_evidence(outcome.attempt_dir)),
    }


def _hang_record(hang: HangAnalysis | None) -> dict[str, Any] | None:
    if hang is None:
        return None
    return {
        "stuck_for_s": round(hang.stuck_for, 3),
        "timeout_s": hang.timeout,
        "groups": [_group_record(g) for g in hang.groups],
        "exited": [{"rank": rank, "how": how} for rank, how in hang.exited],
        "culprits": list(hang.culprits),
        "reason": hang.reason,
        "stacks_dir": str(hang.stacks_dir) if hang.stacks_dir else None,
    }


def _deadline_record(deadline: Deadline | None) -> dict[str, Any] | None:
    """The hang deadline applied at the attempt's end (docs/hang-detection.md); None: off."""
    if deadline is None:
        return None
    return {
        "mode": "auto" if deadline.auto else "fixed",
        "seconds": round(deadline.seconds, 3),
        "basis": deadline.basis,
        "why": deadline.why,
    }


def report_record(
    outcome: Outcome,
    diagnosis: Diagnosis,
    run_id: str,
    max_restarts: int,
    earlier: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The machine-readable report of one attempt (schema: REPORT_SCHEMA).

    `earlier`: the run's previous attempts (attempt, status, exit_code), oldest first.
    """
    signature = diagnosis.signature
    cause = diagnosis.root_cause
    return {
        "schema": REPORT_SCHEMA,
        "run_id": run_id,
        "attempt": outcome.attempt,
        "max_restarts": max_restarts,
        "attempts": [
            *(earlier or []),
            {
                "attempt": outcome.attempt,
                "status": outcome.status,
                "exit_code": exit_code(outcome, diagnosis),
            },
        ],
        "status": outcome.status,
        "exit_code": exit_code(outcome, diagnosis),
        "duration_s": round(outcome.duration, 3),
        "ranks": [_rank_record(r) for r in outcome.ranks],
        "first_failure": outcome.first_failure.rank if outcome.first_failure else None,
        "hang": _hang_record(diagnosis.hang),
        "survivors": _survivors_record(outcome, diagnosis),
        "hang_deadline": _deadline_record(outcome.hang_deadline),
        "collectives": _collectives_record(diagnosis.collectives),
        "stragglers": stragglers.record(diagnosis.stragglers),
        "diagnosis": {
            "class": diagnosis.klass,
            "root_cause_rank": cause.rank if cause else None,
            "signature": signature.id if signature else None,
            "summary": signature.meaning if signature else diagnosis.seen,
            "next_steps": list(signature.next_steps) if signature else [],
            "error": diagnosis.error.line if diagnosis.error else diagnosis.evidence,
            "location": diagnosis.error.location if diagnosis.error else None,
            "error_source": diagnosis.error.source if diagnosis.error else None,
            "consequences": [{"rank": r, "signature": s} for r, s in diagnosis.consequences],
            "non_finite_losses": [{"rank": r, "line": line} for r, line in diagnosis.non_finite],
            "isolation_helps": signature.isolation_helps if signature else None,
            "left_early": diagnosis.left_early,
            "leaves": _leave_records(diagnosis),
            "collectives": {str(r): seq for r, seq in diagnosis.seqs.items()},
            "last_lines": list(diagnosis.last_lines),
            **_verdict_record(diagnosis),
        },
        "isolation": None,  # filled in by isolation.record once the reruns are done
        # multi-node: another node stopped this one (or vanished)
        "stopped_by_node": outcome.peer_event.shown if outcome.peer_event else None,
        "job": None,  # multi-node: the verdict across nodes (launch fills it in)
        "log_problems": list(outcome.log_problems),
    }


def _verdict_record(diagnosis: Diagnosis) -> dict[str, Any]:
    """The arbiter's `verdict`, `culprits` and `disagreeing` (failed and hung attempts)."""
    if diagnosis.verdict is None:  # a job that ended well imports nothing more
        return {"verdict": None, "culprits": [], "disagreeing": []}
    from safelaunch.diagnose.arbiter import record

    known = diagnosis.klass if diagnosis.klass != UNKNOWN else None  # unknown is no class
    return record(diagnosis.verdict, klass=known)


def _collectives_record(forensics: Forensics | None) -> dict[str, Any] | None:
    if forensics is None:
        return None
    from safelaunch.flights import forensics as collectives

    return collectives.record(forensics)


def _leave_records(diagnosis: Diagnosis) -> dict[str, Any]:
    if not diagnosis.leaves:
        return {}
    from safelaunch.diagnose.leaving import leave_record

    return {str(r): leave_record(leave) for r, leave in diagnosis.leaves.items()}


def write_report(path: Path, record: dict[str, Any]) -> bool:
    """Write report.json atomically; False when the directory is not writable."""
    return write_file(path, json.dumps(record, indent=1))


def job_record(place: Placement, job: JobVerdict) -> dict[str, Any]:
    """report.json's `job` (multi-node): the verdict every node drew from all summaries."""
    return {
        "node": place.node,
        "nodes": place.nodes,
        "hosts": list(place.hosts),
        "status": job.status,
        "exit_code": job.code,
        "root_node": job.root_node,
        "lost_nodes": list(job.lost),
        "summary": list(job.lines),
        **_job_culprits(job),
    }


def _job_culprits(job: JobVerdict) -> dict[str, Any]:
    """The job's `verdict`, `culprits` (with node and host) and `disagreeing`."""
    from safelaunch.diagnose.arbiter import record

    return record(job.verdict, dict(job.placed or {}))
