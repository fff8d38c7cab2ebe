"""The root-cause rank's block, one rendering for the live summary and for `explain`.

Both say the same rank with the same class, error, location, next steps and log, in the
same words, whether the cause was seen live (report.py) or read back from logs
(explain.py); each adds its own headline (the live one knows how long the rank ran).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from safelaunch.diagnose.errortext import ErrorText
from safelaunch.diagnose.signatures import Signature
from safelaunch.vocab import FailureClass


@dataclass(frozen=True, slots=True, kw_only=True)
class CauseView:
    """The root-cause rank as the live summary and `explain` both show it (one rendering)."""

    klass: FailureClass
    signature: Signature | None
    error: ErrorText | None
    evidence: str | None  # the log line that matched the signature
    last_lines: tuple[str, ...]  # the end of its log, shown when it has no error line
    how: str  # "exited with code 3", "died of SIGSEGV (exit 139)", "ended"
    leave_lines: tuple[str, ...] = ()  # how it left early (diagnose/leaving.py)
    crashed_at_exit: bool = False
    log: str | None = None
    seen: str | None = None  # class unknown: what its traceback's layers showed
    # the job asked for or used NCCL (or its backend is not known): else NCCL's advice
    # (NCCL_DEBUG, bisecting NCCL_P2P_DISABLE, ...) is left out, it cannot apply
    nccl: bool = True


def known_class_line(klass: str, signature_id: str, meaning: str) -> str:
    """`  class: K (id): meaning`: a failure or hang whose signature is known."""
    return f"  class: {klass} ({signature_id}): {meaning}"


def next_lines(steps: Iterable[str]) -> list[str]:
    """`  next:  ...`, one line per step."""
    return [f"  next:  {step}" for step in steps]


def cause_lines(view: CauseView) -> list[str]:
    """Its class and why, the error and where, the next steps and its log."""
    signature = view.signature
    if signature is not None:
        lines = [known_class_line(view.klass, signature.id, signature.meaning)]
        lines.extend(f"  {line}" for line in view.leave_lines)
    elif view.error is not None and view.seen:
        lines = [f"  class: {view.klass}: no rule decides; seen: {view.seen}"]
    elif view.error is not None:
        lines = [f"  class: {view.klass}: no known signature; the error below is the lead"]
    elif view.last_lines:
        lines = [
            f"  class: {view.klass}: it {view.how} without a traceback; "
            "the last lines of its log are the lead:"
        ]
    else:
        lines = [
            f"  class: {view.klass}: it {view.how} without an error message (its log is empty)"
        ]
    if view.error is None:
        lines.extend(f"  | {line}" for line in view.last_lines)
    if view.error is not None:
        lines.append(f"  error: {view.error.line}")
        if view.error.location:
            lines.append(f"  at:    {view.error.location}")
    elif view.evidence:
        lines.append(f"  error: {view.evidence}")
    if view.crashed_at_exit:
        lines.append(
            "  then:  it crashed at exit (torch/Gloo teardown abort): the error above is the cause"
        )
    steps = signature.next_steps if signature else ()
    if not view.nccl:
        steps = tuple(step for step in steps if "NCCL_" not in step)
    lines.extend(next_lines(steps[:4]))
    if view.log is not None:
        lines.append(f"  log:   {view.log}")
    return lines


def consequence_lines(consequences: Sequence[tuple[int, str]]) -> list[str]:
    """The ranks that failed only because the root cause did."""
    return [
        f"  rank {rank}: failed as a consequence ({signature_id}), not a cause"
        for rank, signature_id in consequences
    ]
