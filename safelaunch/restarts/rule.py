"""The restart rule: a pure function over the facts of the job's attempts so far.

torchrun restarts the whole group after any failure until --max-restarts runs out. A
restart after a syntax error, a shape mismatch or a missing key fails the same way again
and burns the allocation; after a lost node, a reset connection or an OOM kill it can
help. `--restart-policy auto` tells the two apart from the diagnosis: the signature's
persistence (the tables below), the exception type, a signal from outside, and whether
the failure moved (same rank, same line, same step as the previous attempt). `always`
is torchrun's behaviour, `never` restarts nothing. The end of the restarts is said to a
scheduler too: exit 93 (do not requeue) and 75 (EX_TEMPFAIL: requeue may help), under
auto with --max-restarts > 0 only, so that a launch without restarts keeps torchrun's
codes (the root cause's own). docs/restarts.md states the rule for users; tests/
test_restart_rule.py checks it over generated histories.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from safelaunch import exitcodes
from safelaunch.vocab import StrEnum, Switch

RestartPolicy = Switch  # auto | always | never, as --isolate and --color


class Persistence(StrEnum):
    """Would the same failure come back on a restart?"""

    DETERMINISTIC = "deterministic"  # the program or its setup: it fails the same way
    TRANSIENT = "transient"  # the machine or the network: a restart can help
    UNKNOWN = "unknown"


class Why(StrEnum):
    """Why the restarts go on or stop: a closed set, said in words by Decision.reason."""

    POLICY_NEVER = "--restart-policy never"
    POLICY_ALWAYS = "--restart-policy always"
    SPENT = "restarts spent"
    DETERMINISTIC = "deterministic failure"
    REPEATED = "the same failure as the previous attempt"
    NO_PROGRESS = "failed at the same step as the previous attempt, with no progress between"
    TRANSIENT = "transient failure"
    UNDECIDED = "not known to repeat"


# Signature ids (diagnose/signatures/, diagnose/pytypes.py, and diagnose/layerclass.py's
# rows as layer-<id>) whose failure is the program's or its setup's: a restart reruns it.
DETERMINISTIC_SIGNATURES = frozenset(
    {
        # environment/launch: the build, the devices, the files the job needs
        "nccl-not-built",
        "pg-not-initialized",
        "torch-without-cuda",
        "invalid-device-ordinal",
        "no-cuda-gpus",
        "duplicate-gpu",
        "checkpoint-corrupt",
        "checkpoint-weights-only",
        "save-dir-missing",
        "python-import-name",
        "python-import-error",
        "python-missing-file",
        "python-permission-error",
        "layer-env-var",
        "layer-path",
        "layer-unpickle",
        "layer-package-api",
        "layer-checkpoint",
        "layer-cuda",
        # model/gradient: the code meets its own tensors
        "ddp-unused-parameters",
        "ddp-model-mismatch",
        "autograd-graph-misuse",
        "device-mismatch",
        "state-dict-mismatch",
        "shape-mismatch",
        "python-numeric-error",
        "layer-model",
        "layer-autograd",
        "layer-optimizer",
        # data/sampling and communication faults that are the program's
        "sampler-and-shuffle",
        "collate-size-mismatch",
        "label-out-of-range",
        "python-stop-iteration",
        "python-decode-error",
        "layer-decode",
        "collective-mismatch",
        "rank-left-early",
    }
)
# ... and those of the machine or the network: a restart can succeed.
TRANSIENT_SIGNATURES = frozenset(
    {
        "name-resolution",
        "store-unreachable",
        "store-clients-missing",
        "store-connection-lost",
        "store-rendezvous-error",
        "peer-connection-closed",
        "collective-timeout",
        "nccl-remote-error",
        "nccl-system-error",
        "shutdown-crash",
        "killed-sigkill",
        "layer-network-errno",
        "layer-network",
    }
)
# An error line of these types, whatever signature it matched (or none): the code itself.
DETERMINISTIC_EXCEPTIONS = frozenset(
    {"SyntaxError", "IndentationError", "TabError", "ImportError", "ModuleNotFoundError"}
    | {"NameError", "UnboundLocalError"}
)
# A rank that died of one of these was stopped from outside (the OOM killer, an operator,
# a preempting scheduler): nothing in the program raises them.
OUTSIDE_SIGNALS = frozenset(
    {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptFacts:
    """What the rule needs to know of one failed (or hung) attempt."""

    attempt: int
    hung: bool = False
    rank: int | None = None  # the root cause
    signature: str | None = None
    klass: str | None = None
    exception: str | None = None  # the error line's exception type, unqualified
    location: str | None = None  # the root cause's innermost frame of the user's code
    signum: int | None = None  # the root cause died of this signal
    step: int | None = None  # the furthest step any rank reported (heartbeat records)
    node_lost: bool = False  # multi-node: another node vanished

    @property
    def where(self) -> tuple[object, ...]:
        """The failure's place: equal on two attempts means it did not move."""
        return (self.hung, self.rank, self.signature, self.exception, self.location, self.step)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """Restart or stop, why, and what a scheduler should do with the job if it stops."""

    restart: bool
    why: Why
    persistence: Persistence
    detail: str  # which facts decided: "signature shape-mismatch", "rank 1 at train.py:9"
    code: int | None = None  # replaces the root cause's code (exitcodes.NO_REQUEUE, REQUEUE)

    @property
    def requeue(self) -> bool | None:
        """For a scheduler: True requeue may help, False it would fail again, None unknown."""
        if self.persistence == Persistence.UNKNOWN:
            return None
        return self.persistence == Persistence.TRANSIENT

    @property
    def reason(self) -> str:
        return f"{self.why.value} ({self.detail})" if self.detail else self.why.value

    def record(self, policy: RestartPolicy) -> dict[str, Any]:
        """report.json's `restarts` (docs/report-json.md)."""
        return {
            "policy": policy,
            "restart": self.restart,
            "why": self.why,
            "reason": self.reason,
            "persistence": self.persistence,
            "requeue": self.requeue,
        }


def persistence_of(facts: AttemptFacts) -> tuple[Persistence, str]:
    """The failure's persistence from its own facts, and the fact that says so."""
    if facts.exception in DETERMINISTIC_EXCEPTIONS:
        return Persistence.DETERMINISTIC, f"{facts.exception}"
    if facts.signature in DETERMINISTIC_SIGNATURES:
        return Persistence.DETERMINISTIC, f"signature {facts.signature}, {facts.klass}"
    if facts.node_lost:
        return Persistence.TRANSIENT, "a node was lost"
    if facts.signature in TRANSIENT_SIGNATURES:
        return Persistence.TRANSIENT, f"signature {facts.signature}, {facts.klass}"
    if facts.signum in OUTSIDE_SIGNALS:
        return Persistence.TRANSIENT, f"rank {facts.rank} got {exitcodes.signal_name(facts.signum)}"
    return Persistence.UNKNOWN, facts.signature or ""


def _place(facts: AttemptFacts) -> str:
    parts = [f"rank {facts.rank}" if facts.rank is not None else "a hang" if facts.hung else ""]
    if facts.location:
        parts.append(f"at {facts.location}")
    if facts.step is not None:
        parts.append(f"step {facts.step}")
    return " ".join(p for p in parts if p)


def _stalled(previous: AttemptFacts, latest: AttemptFacts) -> Decision | None:
    """The failure did not move since the previous attempt: a restart would repeat it.

    The same *error* at the same place: an exit code without one (sys.exit(N), a signal)
    is the program's own answer, often to what it found outside (a restart count, a file),
    so only its step counts. Without a place or a step nothing says it did not move.
    """
    named = latest.exception is not None or latest.signature is not None
    placed = latest.location is not None or latest.step is not None
    if latest.where == previous.where and named and placed:
        detail = f"attempt {previous.attempt} and {latest.attempt}: {_place(latest)}"
        return Decision(
            restart=False, why=Why.REPEATED, persistence=Persistence.DETERMINISTIC, detail=detail
        )
    if latest.step is not None and latest.step == previous.step:
        detail = f"step {latest.step} in attempts {previous.attempt} and {latest.attempt}"
        return Decision(
            restart=False, why=Why.NO_PROGRESS, persistence=Persistence.DETERMINISTIC, detail=detail
        )
    return None


def decide(policy: RestartPolicy, attempts: Sequence[AttemptFacts], max_restarts: int) -> Decision:
    """After the last of `attempts` (the job's failed ones, oldest first): restart or not.

    The codes for a scheduler are auto's and only with restarts on (max_restarts > 0):
    NO_REQUEUE when auto ends the restarts early, REQUEUE when a transient failure used
    them all; otherwise the root cause's own code stands (None).
    """
    latest = attempts[-1]
    persistence, detail = persistence_of(latest)
    scheduled = policy == RestartPolicy.AUTO and max_restarts > 0
    if policy == RestartPolicy.NEVER:
        return Decision(restart=False, why=Why.POLICY_NEVER, persistence=persistence, detail=detail)
    if latest.attempt >= max_restarts:
        code = exitcodes.REQUEUE if scheduled and persistence == Persistence.TRANSIENT else None
        spent = f"{max_restarts} of {max_restarts}" + (f"; {detail}" if detail else "")
        return Decision(
            restart=False, why=Why.SPENT, persistence=persistence, detail=spent, code=code
        )
    if policy == RestartPolicy.ALWAYS:
        return Decision(restart=True, why=Why.POLICY_ALWAYS, persistence=persistence, detail=detail)
    if persistence == Persistence.DETERMINISTIC:
        return Decision(
            restart=False,
            why=Why.DETERMINISTIC,
            persistence=persistence,
            detail=detail,
            code=exitcodes.NO_REQUEUE,
        )
    stalled = _stalled(attempts[-2], latest) if len(attempts) > 1 else None
    if stalled is not None:
        return Decision(
            restart=False,
            why=stalled.why,
            persistence=stalled.persistence,
            detail=stalled.detail,
            code=exitcodes.NO_REQUEUE,
        )
    why = Why.TRANSIENT if persistence == Persistence.TRANSIENT else Why.UNDECIDED
    return Decision(restart=True, why=why, persistence=persistence, detail=detail)
