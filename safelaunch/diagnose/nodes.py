"""Multi-node: one verdict for the whole job from every node's end-of-attempt summary.

Each node diagnoses its own ranks and publishes a summary through the rendezvous
store; every node then draws the same conclusion from the same summaries: which node
and rank is the root cause, the job's exit code, whether all nodes restart. The
summary is a projection of the node's report.json (same keys), plus the two things
only that node can tell (its root cause in one line, and whether that rank's log shows
only a peer's death); the choice of a cause is rootcause.py's rule, applied to nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from safelaunch import exitcodes
from safelaunch.diagnose import Diagnosis, describe_ending, jobwide, read_tail
from safelaunch.diagnose.arbiter import Verdict, decide, headline
from safelaunch.diagnose.jobwide import NodeEvidence, unpack
from safelaunch.diagnose.match import matches
from safelaunch.diagnose.rootcause import after_cause, first_cause
from safelaunch.diagnose.signatures import CONSEQUENCES
from safelaunch.outcome import AttemptStatus, Outcome, attempt_status
from safelaunch.rendezvous.stops import NodeStop, StopKind


@dataclass(frozen=True, slots=True, kw_only=True)
class JobVerdict:
    """How the attempt ended across all nodes."""

    status: AttemptStatus  # report.json's job.status: succeeded, failed, hung or interrupted
    code: int
    lines: tuple[str, ...]  # for the summary, root cause first
    lost: tuple[int, ...]  # nodes that never reported
    root_node: int | None = None
    verdict: Verdict | None = None  # the arbiter's over every node's evidence
    placed: Mapping[int, tuple[int, str]] | None = None  # rank -> (node, host)

    @property
    def retryable(self) -> bool:
        """Restart every node: a failure or hang, with every node still there."""
        return self.status in (AttemptStatus.FAILED, AttemptStatus.HUNG) and not self.lost


def project(report: Mapping[str, Any]) -> dict[str, Any]:
    """What a node's summary says of report.json, under report.json's own keys."""
    hang = report["hang"]
    return {
        "status": report["status"],
        "exit_code": report["exit_code"],
        "stopped_by_node": report["stopped_by_node"],
        "diagnosis": {"root_cause_rank": report["diagnosis"]["root_cause_rank"]},
        "hang": None if hang is None else {"culprits": hang["culprits"], "reason": hang["reason"]},
    }


def node_summary(
    report: Mapping[str, Any], outcome: Outcome, diagnosis: Diagnosis, node: int, host: str
) -> dict[str, Any]:
    """What this node tells the others about its attempt (JSON): report.json, projected.

    `node` and `host` are what report.json's `job` says of this node once concluded.
    """
    root = diagnosis.root_cause
    return {
        "node": node,
        "host": host,
        **project(report),
        # only this node has them: the line needs its logs, the flag its root's log
        "ending": None if root is None else describe_ending(outcome, diagnosis),
        "consequence": root is not None
        and diagnosis.signature is None
        and _only_consequences(root.log_path),
        "evidence": _evidence(diagnosis),
    }


def _evidence(diagnosis: Diagnosis) -> dict[str, Any] | None:
    if not diagnosis.places and diagnosis.verdict is None:
        return None
    from safelaunch.diagnose.jobwide import pack

    return pack(diagnosis.places, diagnosis.verdict)


def _only_consequences(log: Path) -> bool:
    """The rank's log shows only what a peer's death causes (connection closed, ...)."""
    return bool(matches(read_tail(log), None, CONSEQUENCES))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSummary:
    """One node's summary as the verdict reads it."""

    node: int
    host: str
    status: AttemptStatus
    code: int
    root_rank: int | None  # its root cause; None when it has none (stopped by another node)
    ending: str | None  # that rank's end in one line
    consequence: bool  # that rank's log shows only a peer's death
    culprits: tuple[int, ...] = ()  # a hang's likely culprits
    hang_reason: str = ""
    evidence: NodeEvidence | None = None  # its ranks' places and its arbiter's items

    @property
    def failed(self) -> bool:
        """A failure of its own: a node whose ranks safelaunch stopped has no root cause."""
        return self.status == AttemptStatus.FAILED and self.root_rank is not None

    def where(self) -> str:
        return f"node {self.node} ({self.host})"


def read_summary(data: Mapping[str, Any] | None) -> NodeSummary | None:
    """A summary as node_summary wrote it (JSON-decoded); None for none, or a malformed one."""
    if data is None:
        return None
    try:
        hang = data["hang"]
        return NodeSummary(
            node=int(data["node"]),
            host=str(data["host"]),
            status=attempt_status(str(data["status"])),
            code=int(data["exit_code"]),
            root_rank=data["diagnosis"]["root_cause_rank"],
            ending=data["ending"],
            consequence=bool(data["consequence"]),
            culprits=tuple(int(r) for r in hang["culprits"]) if hang else (),
            hang_reason=str(hang["reason"]) if hang else "",
            evidence=unpack(int(data["node"]), str(data["host"]), data.get("evidence")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _failure_line(summary: NodeSummary) -> str:
    return f"FAILED on {summary.where()}: {summary.ending}"


def _is_cause(summary: NodeSummary) -> bool:
    return not summary.consequence


def conclude_job(
    summaries: Sequence[NodeSummary | None],
    hosts: Sequence[str],
    first_stop: NodeStop | None,
    lost_after: float,
) -> JobVerdict:
    """The job's verdict: status, exit code and root node from the nodes' summaries
    (by_nodes), then the culprit from every node's evidence weighed together."""
    job = by_nodes(summaries, hosts, first_stop, lost_after)
    shipped = [s.evidence for s in summaries if s is not None and s.evidence is not None]
    if job.status not in (AttemptStatus.FAILED, AttemptStatus.HUNG) or not shipped:
        return job
    verdict = decide(jobwide.job_items(shipped))
    placed = {p.rank: (n.node, n.host) for n in shipped for p in n.ranks}
    words = {rank: f"node {node}, host {host}" for rank, (node, host) in placed.items()}
    line = headline(verdict, words)
    job = replace(job, verdict=verdict, placed=placed)
    if line is None or job.lost:
        # a lost node shipped nothing: what the others saw of it are consequences, and
        # "node N was lost" stays the headline
        return job
    culprit_nodes = {placed[r][0] for r in verdict.culprits if r in placed}
    root_node = min(culprit_nodes) if len(culprit_nodes) == 1 else job.root_node
    if job.status == AttemptStatus.HUNG:
        # one line per place where the job's ranks wait, then the culprit: the nodes'
        # own lines judged only their ranks, and would contradict it or say nothing
        kept = [text for text in job.lines if not text.startswith("HUNG on ")]
        places = [f"  {text}" for text in jobwide.place_lines(shipped)]
        return replace(job, lines=(f"HUNG: {line}", *places, *kept), root_node=root_node)
    if job.root_node is not None and verdict.culprits and root_node != job.root_node:
        return replace(job, lines=(line, *job.lines), root_node=root_node)
    return replace(job, lines=(*job.lines[:1], f"  {line}", *job.lines[1:]))


def by_nodes(
    summaries: Sequence[NodeSummary | None],
    hosts: Sequence[str],
    first_stop: NodeStop | None,
    lost_after: float,
) -> JobVerdict:
    """The job's status, exit code and root cause from every node's summary."""
    lost = tuple(node for node, s in enumerate(summaries) if s is None)
    if not lost and first_stop is not None and first_stop.kind is StopKind.NODES_JOINING:
        # stopped first to admit waiting nodes: what ended after it (a peer's ranks gone
        # a moment earlier) is that stop's consequence, and the job goes on at once
        return JobVerdict(status=AttemptStatus.RESCALED, code=exitcodes.SUCCESS, lines=(), lost=())
    present = [s for s in summaries if s is not None]
    lines = [
        f"node {node} ({hosts[node] if node < len(hosts) else '?'}) was lost: its launcher "
        f"gave no sign of life for more than {lost_after:g} s before its report (it died, "
        "or the network failed); its ranks are the likely cause of what the others saw"
        for node in lost
    ]
    interrupted = [s for s in present if s.status == AttemptStatus.INTERRUPTED]
    if interrupted:
        first = interrupted[0]
        lines.insert(0, f"INTERRUPTED on {first.where()}")
        return JobVerdict(
            status=AttemptStatus.INTERRUPTED, code=first.code, lines=tuple(lines), lost=lost
        )
    # Across nodes "earliest" is the first stop announced (the store orders them), then
    # the node order: rootcause.py's rule then picks the cause among the failures.
    origin = first_stop.node if first_stop is not None else None
    failed = sorted((s for s in present if s.failed), key=lambda s: (s.node != origin, s.node))
    root = first_cause(failed, _is_cause)
    hung = [s for s in present if s.status == AttemptStatus.HUNG]
    if root is not None and _is_cause(root):
        lines.insert(0, _failure_line(root))
        code = exitcodes.NODE_LOST if lost else root.code
        return JobVerdict(
            status=AttemptStatus.FAILED,
            code=code,
            lines=tuple(lines),
            lost=lost,
            root_node=root.node,
        )
    # What only followed another node's fault (its ranks vanished: "Connection closed by
    # peer") is listed after the cause: a lost node, else a hang.
    consequences = [
        f"{s.where()}, as a consequence: {s.ending}" for s in after_cause(failed, None, _is_cause)
    ]
    if lost:
        return JobVerdict(
            status=AttemptStatus.FAILED,
            code=exitcodes.NODE_LOST,
            lines=(*lines, *consequences),
            lost=lost,
            root_node=lost[0],
        )
    if hung:  # the nodes that name a culprit first: the others only wait for it
        hung.sort(key=lambda s: not s.culprits)
        for summary in hung:
            culprits = ",".join(map(str, summary.culprits))
            who = f"likely culprit rank {culprits}: " if culprits else ""
            lines.append(f"HUNG on {summary.where()}: {who}{summary.hang_reason}")
        return JobVerdict(
            status=AttemptStatus.HUNG,
            code=exitcodes.HANG,
            lines=(*lines, *consequences),
            lost=lost,
            root_node=hung[0].node,
        )
    if root is not None:  # only consequences, and nothing else to blame: the earliest
        return JobVerdict(
            status=AttemptStatus.FAILED,
            code=root.code,
            lines=(_failure_line(root),),
            lost=lost,
            root_node=root.node,
        )
    if any(s.status != AttemptStatus.SUCCEEDED for s in present):
        lines.append(f"stopped: {first_stop.shown if first_stop else 'another node stopped'}")
        return JobVerdict(
            status=AttemptStatus.FAILED, code=exitcodes.NODE_LOST, lines=tuple(lines), lost=lost
        )
    return JobVerdict(status=AttemptStatus.SUCCEEDED, code=exitcodes.SUCCESS, lines=(), lost=())
