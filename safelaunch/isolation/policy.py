"""The rerun policy: is the Gloo rerun worth its cost for this failure?

A rerun doubles the wall time, repeats the script's side effects and holds the
allocation, so `--isolate auto` spends one only where the question "communication
layer or program?" is open: the job used NCCL and the way it ended can come from the
communication layer. The rule is a pure function of two closed vocabularies (how
the job ended, which backend it used) and is tested as a table over both
(tests/test_rerun_policy.py); docs/isolation.md states it for users. The decision's
reason is one of a closed set (Why), said in words by Decision.reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from safelaunch.diagnose import Diagnosis
from safelaunch.outcome import AttemptStatus, Outcome
from safelaunch.vocab import COMMUNICATION, RESOURCES, UNKNOWN, StrEnum, Switch

FORCE = "to rerun anyway: --isolate always"


class Ending(StrEnum):
    """How the job ended, as far as the communication-layer question goes."""

    HANG = "a hang"
    COMMUNICATION = "a communication failure"
    NCCL_ERROR = "an NCCL error"
    NATIVE_CRASH = "a native crash"
    SILENT_EXIT = "an exit with no Python error"
    UNKNOWN = "an unknown failure"
    PYTHON_ERROR = "a Python exception in the program"
    STARTUP_ERROR = "the script could not start (compile or import error)"
    PROGRAM_EXIT = "the program's own sys.exit"
    PROGRAM_FAULT = "a known fault of the program or its setup"  # a signature says which
    OUT_OF_MEMORY = "out of memory (or killed)"
    EXIT_CRASH = "a crash at exit, after the work was done"


class Backend(StrEnum):
    """What the ranks' backend records (rank<N>.comm.json) say the job ran on."""

    NCCL = "NCCL"
    NCCL_NOT_UP = "NCCL, asked for but never up"  # init failed or hung (a CPU build: always)
    GLOO = "Gloo only"
    NONE = "no process group"


# Endings the communication layer can cause: the question is open for these.
COMM_POSSIBLE = frozenset(
    {
        Ending.HANG,
        Ending.COMMUNICATION,
        Ending.NCCL_ERROR,
        Ending.NATIVE_CRASH,
        Ending.SILENT_EXIT,
        Ending.UNKNOWN,
    }
)
# A Python error raised before the script ran a line of training: it cannot be NCCL's.
STARTUP_ERRORS = (
    "SyntaxError",
    "IndentationError",
    "TabError",
    "ModuleNotFoundError",
    "ImportError",
)
# torch.distributed's own exception types: raised by the communication layer, not the program.
DIST_ERRORS = ("DistBackendError", "DistNetworkError", "DistStoreError", "DistError")


class Why(StrEnum):
    """Why the Gloo rerun runs or not (Decision.reason says it in words)."""

    NEVER = "never"  # --isolate never
    ALWAYS = "always"  # --isolate always
    NOT_A_FAILURE = "not a failure"  # the job succeeded or was interrupted: outside the table
    ANY_BACKEND = "any backend"  # an ending the program repeats on any backend
    NCCL_QUESTION = "nccl question"  # NCCL: the communication layer, or the program?
    GLOO_HANG_DETAIL = "gloo hang detail"  # a Gloo hang: DETAIL's check can name a mismatch
    SAME_BACKEND = "same backend"  # Gloo only: the rerun would repeat the job's backend
    NO_PROCESS_GROUP = "no process group"  # failed before any process group existed


RERUN = frozenset({Why.ALWAYS, Why.NCCL_QUESTION, Why.GLOO_HANG_DETAIL})  # the reasons to run


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """Whether the Gloo rerun runs, and why (the report says it either way)."""

    run: bool
    why: Why
    ending: Ending | None = None
    backend: Backend | None = None
    status: AttemptStatus | None = None  # the job's status, for NOT_A_FAILURE

    @property
    def reason(self) -> str:
        """The why in one line, with how to force a rerun where `auto` declined."""
        what = self.ending.value if self.ending is not None else ""
        match self.why:
            case Why.NEVER:
                return "--isolate never"
            case Why.ALWAYS:
                return "--isolate always"
            case Why.NOT_A_FAILURE:
                return f"the job {self.status}"
            case Why.ANY_BACKEND:
                return f"{what}: it fails the same way on any backend; {FORCE}"
            case Why.NCCL_QUESTION:
                return f"{what} on NCCL: is it the communication layer or the program?"
            case Why.GLOO_HANG_DETAIL:
                return (
                    "a hang on Gloo: rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to name a "
                    "collective the ranks call differently"
                )
            case Why.SAME_BACKEND:
                return (
                    f"{what}, but the job never used NCCL, a rerun on Gloo would repeat the "
                    f"same backend; {FORCE}"
                )
            case Why.NO_PROCESS_GROUP:
                return f"{what}, but the job failed before any process group existed; {FORCE}"


def decide(mode: Switch, ending: Ending, backend: Backend, detail_possible: bool) -> Decision:
    """The policy for a failed or hung job. Pure: the table test covers every combination.

    detail_possible: the Gloo rerun would get TORCH_DISTRIBUTED_DEBUG=DETAIL (the job
    initialised a process group, built no DDP model, and the variable is not yours).
    """
    why = _why(mode, ending, backend, detail_possible)
    return Decision(run=why in RERUN, why=why, ending=ending, backend=backend)


def _why(mode: Switch, ending: Ending, backend: Backend, detail_possible: bool) -> Why:
    if mode == Switch.NEVER:
        return Why.NEVER
    if mode == Switch.ALWAYS:
        return Why.ALWAYS
    if ending not in COMM_POSSIBLE:
        return Why.ANY_BACKEND
    if backend in (Backend.NCCL, Backend.NCCL_NOT_UP):
        return Why.NCCL_QUESTION
    if backend == Backend.GLOO and ending == Ending.HANG and detail_possible:
        # Same backend, so not the NCCL question; but a silent hang is often a rank that
        # skipped or reordered a collective, which torch's DETAIL check turns into a named
        # error, and the job ran without it.
        return Why.GLOO_HANG_DETAIL
    return Why.SAME_BACKEND if backend == Backend.GLOO else Why.NO_PROCESS_GROUP


def ending_of(outcome: Outcome, diagnosis: Diagnosis) -> Ending:
    """Map an attempt's diagnosis onto the policy's vocabulary."""
    if outcome.status == AttemptStatus.HUNG:
        return Ending.HANG
    signature = diagnosis.signature
    if signature is not None:
        if signature.id == "shutdown-crash":
            return Ending.EXIT_CRASH
        if signature.klass == RESOURCES:
            return Ending.OUT_OF_MEMORY
        if signature.klass == COMMUNICATION:
            return Ending.COMMUNICATION
        if signature.isolation_helps:
            return Ending.NATIVE_CRASH if signature.signals else Ending.NCCL_ERROR
        return Ending.UNKNOWN if signature.klass == UNKNOWN else Ending.PROGRAM_FAULT
    if diagnosis.crashed_at_exit:
        return _python_ending(diagnosis.error.line if diagnosis.error else "")
    root = diagnosis.root_cause
    error = diagnosis.error
    if error is not None and error.source == "evidence":  # the arbiter's culprit, no error
        return Ending.COMMUNICATION if diagnosis.klass == COMMUNICATION else Ending.UNKNOWN
    if error is not None and not error.line.startswith("Fatal Python error"):
        return _python_ending(error.line)
    if error is not None or (root is not None and root.signal is not None):
        return Ending.NATIVE_CRASH
    return Ending.SILENT_EXIT if root is not None else Ending.UNKNOWN


def _python_ending(line: str) -> Ending:
    kind = line.split(":", 1)[0].strip().rsplit(".", 1)[-1]
    if kind in STARTUP_ERRORS:
        return Ending.STARTUP_ERROR
    if kind == "SystemExit":
        return Ending.PROGRAM_EXIT
    if kind in DIST_ERRORS:
        return Ending.COMMUNICATION
    return Ending.PYTHON_ERROR


def backend_of(
    requested: tuple[str, ...], used: tuple[str, ...], attempted: bool, initialised: bool
) -> Backend:
    """From the ranks' backend records: NCCL up, NCCL asked for, Gloo only, or none.

    A rank that asked for torch's default backend and never got it up could have been
    bound for NCCL (a CUDA build): counted as NCCL_NOT_UP, the cautious side.
    """
    if any("nccl" in backend for backend in used):
        return Backend.NCCL
    if any("nccl" in backend for backend in requested):
        return Backend.NCCL_NOT_UP
    if initialised:
        return Backend.GLOO
    if attempted:
        return Backend.NCCL_NOT_UP if not requested else Backend.GLOO
    return Backend.NONE


def should_isolate(
    mode: Switch, outcome: Outcome, diagnosis: Diagnosis, backend: Backend, detail_possible: bool
) -> Decision:
    """The decision for a finished attempt: only failures and hangs are candidates."""
    if outcome.status not in (AttemptStatus.FAILED, AttemptStatus.HUNG):
        return Decision(run=False, why=Why.NOT_A_FAILURE, status=outcome.status)
    return decide(mode, ending_of(outcome, diagnosis), backend, detail_possible)
