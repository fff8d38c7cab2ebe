"""Why a node stops its ranks, as a record: sent to the other nodes as JSON, parsed here only.

A node that stops an attempt (a rank failed, a signal, a hang) announces it through
the store; the others stop their ranks too and later name that node's as the root
cause. What the user reads ("node 1: rank 3 failed (returncode 1)") is rendered from
the record where it is shown; nothing parses it back.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from typing import Any

from safelaunch.vocab import StrEnum


class StopKind(StrEnum):
    """What made a node stop; the others act on it (a hang: they take their stacks too)."""

    RANK_FAILED = "rank failed"
    INTERRUPTED = "interrupted"
    HANG = "hang"
    # Elastic: nodes wait in torch's rendezvous to join; every node stops to admit them
    # at the next round (rendezvous/admission.py). Not a failure.
    NODES_JOINING = "nodes joining"
    # Found by this node itself, never announced: the other side is gone.
    NODES_LOST = "nodes lost"  # other nodes' launchers stopped beating
    STORE_LOST = "store lost"  # the rendezvous store stopped answering


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeStop:
    """One node's reason to stop an attempt."""

    kind: StopKind
    node: int | None  # the node that announced it; None: this node found it (a loss)
    attempt: int
    text: str  # what happened there, in words: `rank 3 failed (returncode 1)`
    rank: int | None = None  # RANK_FAILED: the global rank
    code: int | None = (
        None  # RANK_FAILED: its returncode as Popen gives it; INTERRUPTED: the signal
    )

    @property
    def shown(self) -> str:
        """As the console and report.json say it: `node 1: rank 3 failed (returncode 1)`."""
        return self.text if self.node is None else f"node {self.node}: {self.text}"

    def __str__(self) -> str:
        return self.shown

    def to_json(self) -> str:
        return json.dumps(
            {
                "kind": self.kind.value,
                "node": self.node,
                "attempt": self.attempt,
                "text": self.text,
                "rank": self.rank,
                "code": self.code,
            }
        )


def rank_failed(node: int, attempt: int, rank: int, returncode: int) -> NodeStop:
    return NodeStop(
        kind=StopKind.RANK_FAILED,
        node=node,
        attempt=attempt,
        text=f"rank {rank} failed (returncode {returncode})",
        rank=rank,
        code=returncode,
    )


def interrupted(node: int, attempt: int, signum: int) -> NodeStop:
    text = f"interrupted by {signal.Signals(signum).name}"
    return NodeStop(kind=StopKind.INTERRUPTED, node=node, attempt=attempt, text=text, code=signum)


def hang(node: int, attempt: int, timeout: float) -> NodeStop:
    text = f"hang: no progress for {timeout:g} s"
    return NodeStop(kind=StopKind.HANG, node=node, attempt=attempt, text=text)


def nodes_joining(node: int, attempt: int, waiting: int) -> NodeStop:
    text = (
        f"{waiting} node(s) wait to join the job: this attempt stops to admit them at the "
        "next round (elastic, as torchrun)"
    )
    return NodeStop(kind=StopKind.NODES_JOINING, node=node, attempt=attempt, text=text)


def from_json(text: str) -> NodeStop:
    """The record another node announced; ValueError when it is not one."""
    try:
        data: Any = json.loads(text)
        return NodeStop(
            kind=StopKind(data["kind"]),
            node=_optional_int(data["node"]),
            attempt=int(data["attempt"]),
            text=str(data["text"]),
            rank=_optional_int(data.get("rank")),
            code=_optional_int(data.get("code")),
        )
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"not a stop announcement: {text[:200]!r}") from exc


def _optional_int(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not an integer")
    return value
