"""Multi-node: one verdict for the whole job from every node's end-of-attempt summary.

Each node diagnoses its own ranks and publishes a summary through the rendezvous
store; every node then draws the same conclusion from the same summaries: which node
and rank is the root cause, the job's exit code, whether all nodes restart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safelaunch import exitcodes
from safelaunch.diagnose import Diagnosis, describe_ending, read_tail
from safelaunch.diagnose.match import matches
from safelaunch.diagnose.signatures import SIGNATURES
from safelaunch.outcome import FAILED, HUNG, INTERRUPTED, SUCCEEDED, Outcome
from safelaunch.rendezvous.stops import NodeStop

CONSEQUENCES = tuple(s for s in SIGNATURES if s.consequence)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobVerdict:
    """How the attempt ended across all nodes."""

    status: str  # succeeded | failed | hung | interrupted
    code: int
    lines: tuple[str, ...]  # for the summary, root cause first
    lost: tuple[int, ...]  # nodes that never reported
    root_node: int | None = None

    @property
    def retryable(self) -> bool:
        """Restart every node: a failure or hang, with every node still there."""
        return self.status in (FAILED, HUNG) and not self.lost


def node_summary(
    outcome: Outcome, diagnosis: Diagnosis, code: int, node: int, host: str
) -> dict[str, Any]:
    """What this node tells the others about its attempt (JSON-able)."""
    root = diagnosis.root_cause
    signature = diagnosis.signature
    hang = diagnosis.hang
    return {
        "node": node,
        "host": host,
        "status": outcome.status,
        "code": code,
        "stopped_by_peer": outcome.peer_event is not None and root is None,
        "root": None
        if root is None
        else {
            "rank": root.rank,
            "consequence": signature is None and _only_consequences(root.log_path),
            "line": describe_ending(outcome, diagnosis),
        },
        "hang": None if hang is None else {"culprits": list(hang.culprits), "reason": hang.reason},
    }


def _only_consequences(log: Path) -> bool:
    """The rank's log shows only what a peer's death causes (connection closed, ...)."""
    return bool(matches(read_tail(log), None, CONSEQUENCES))


def _failure_line(summary: Mapping[str, Any]) -> str:
    return f"FAILED on node {summary['node']} ({summary['host']}): {summary['root']['line']}"


def conclude_job(
    summaries: Sequence[Mapping[str, Any] | None],
    hosts: Sequence[str],
    first_stop: NodeStop | None,
    lost_after: float,
) -> JobVerdict:
    """The job's status, exit code and root cause from every node's summary."""
    lost = tuple(node for node, s in enumerate(summaries) if s is None)
    present = [s for s in summaries if s is not None]
    lines = [
        f"node {node} ({hosts[node] if node < len(hosts) else '?'}) was lost: its launcher "
        f"gave no sign of life for more than {lost_after:g} s before its report (it died, "
        "or the network failed); its ranks are the likely cause of what the others saw"
        for node in lost
    ]
    interrupted = [s for s in present if s["status"] == INTERRUPTED]
    if interrupted:
        first = interrupted[0]
        lines.insert(0, f"INTERRUPTED on node {first['node']} ({first['host']})")
        return JobVerdict(
            status=INTERRUPTED, code=int(first["code"]), lines=tuple(lines), lost=lost
        )
    origin = first_stop.node if first_stop is not None else None
    failed = [s for s in present if s["status"] == FAILED and s["root"] is not None]
    real = [s for s in failed if not s["root"]["consequence"]]
    hung = [s for s in present if s["status"] == HUNG]
    # What only followed another node's fault (its ranks vanished: "Connection closed by
    # peer") is listed after the cause: a real failure, else a lost node, else a hang.
    consequences = [
        f"node {s['node']} ({s['host']}), as a consequence: {s['root']['line']}"
        for s in failed
        if not real
    ]
    if real:
        root = next((s for s in real if s["node"] == origin), real[0])
        lines.insert(0, _failure_line(root))
        code = exitcodes.NODE_LOST if lost else int(root["code"])
        return JobVerdict(
            status=FAILED, code=code, lines=tuple(lines), lost=lost, root_node=root["node"]
        )
    if lost:
        return JobVerdict(
            status=FAILED,
            code=exitcodes.NODE_LOST,
            lines=(*lines, *consequences),
            lost=lost,
            root_node=lost[0],
        )
    if hung:  # the nodes that name a culprit first: the others only wait for it
        hung.sort(key=lambda s: not (s["hang"] or {}).get("culprits"))
        for summary in hung:
            hang = summary["hang"] or {}
            culprits = ",".join(map(str, hang.get("culprits", [])))
            who = f"likely culprit rank {culprits}: " if culprits else ""
            lines.append(
                f"HUNG on node {summary['node']} ({summary['host']}): {who}{hang.get('reason', '')}"
            )
        return JobVerdict(
            status=HUNG,
            code=exitcodes.HANG,
            lines=(*lines, *consequences),
            lost=lost,
            root_node=hung[0]["node"],
        )
    if failed:
        root = next((s for s in failed if s["node"] == origin), failed[0])
        return JobVerdict(
            status=FAILED,
            code=int(root["code"]),
            lines=(_failure_line(root),),
            lost=lost,
            root_node=root["node"],
        )
    if lost or any(s["status"] != SUCCEEDED for s in present):
        if not lost:
            lines.append(f"stopped: {first_stop.shown if first_stop else 'another node stopped'}")
        return JobVerdict(status=FAILED, code=exitcodes.NODE_LOST, lines=tuple(lines), lost=lost)
    return JobVerdict(status=SUCCEEDED, code=exitcodes.SUCCESS, lines=(), lost=())
