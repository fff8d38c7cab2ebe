"""The facts the restart rule reads, from an attempt's outcome, diagnosis and heartbeats.

The only I/O of the restart policy: the heartbeat records say how far the ranks got (the
step each reported with safelaunch.heartbeat, else the optimizer steps torch counted).
"""

from __future__ import annotations

import re
from pathlib import Path

from safelaunch.diagnose import Diagnosis
from safelaunch.outcome import AttemptStatus, Outcome
from safelaunch.rendezvous.stops import StopKind
from safelaunch.restarts.rule import AttemptFacts
from safelaunch.rundir import heartbeat_file

# `torch.OutOfMemoryError: ...`, `  File ... SyntaxError: invalid syntax`: the type's last name
_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?(?P<name>[A-Za-z_]\w*(?:Error|Exception|Exit))\b")


def exception_type(line: str | None) -> str | None:
    """The exception type an error line names, without its module; None for other lines."""
    found = _EXCEPTION.match(line.strip()) if line else None
    return found["name"] if found else None


def furthest_step(outcome: Outcome, heartbeat_dir: Path | None) -> int | None:
    """The furthest step any rank's last heartbeat record reported; None without steps."""
    if heartbeat_dir is None:
        return None
    steps = []
    for result in outcome.ranks:
        beat = heartbeat_file.read(result.rank, heartbeat_file.path(heartbeat_dir, result.rank))
        if beat is not None:
            step = beat.step if beat.step is not None else beat.optimizer_steps
            if step is not None:
                steps.append(step)
    return max(steps, default=None)


def facts_of(outcome: Outcome, diagnosis: Diagnosis, heartbeat_dir: Path | None) -> AttemptFacts:
    """One failed or hung attempt as the rule sees it."""
    root = diagnosis.root_cause
    error = diagnosis.error
    peer = outcome.peer_event
    return AttemptFacts(
        attempt=outcome.attempt,
        hung=outcome.status == AttemptStatus.HUNG,
        rank=root.rank if root is not None else None,
        signature=diagnosis.signature.id if diagnosis.signature is not None else None,
        klass=diagnosis.klass,
        exception=exception_type(error.line if error is not None else None),
        location=error.location if error is not None else None,
        signum=root.signal if root is not None else None,
        step=furthest_step(outcome, heartbeat_dir),
        node_lost=peer is not None and peer.kind in (StopKind.NODES_LOST, StopKind.STORE_LOST),
    )
