"""The rerun policy as a table: every way a job ends x every backend it used, no job run."""

from __future__ import annotations

import itertools
import signal

import builders
import pytest

from safelaunch.diagnose import Diagnosis
from safelaunch.diagnose.errortext import ErrorText
from safelaunch.diagnose.signatures import SIGNATURES
from safelaunch.isolation.policy import (
    Backend,
    Ending,
    Why,
    backend_of,
    decide,
    ending_of,
    should_isolate,
)
from safelaunch.outcome import AttemptStatus, Outcome, RankResult

E, B = Ending, Backend
NCCLISH = {B.NCCL, B.NCCL_NOT_UP}
# The table, written out rather than derived: where `auto` spends a rerun.
# Per ending: the backends that get one (GLOO_DETAIL: Gloo, only when DETAIL can be on).
GLOO_DETAIL = "gloo, when the rerun can have TORCH_DISTRIBUTED_DEBUG=DETAIL"
RERUNS: dict[Ending, set[object]] = {
    E.HANG: {*NCCLISH, GLOO_DETAIL},
    E.COMMUNICATION: NCCLISH,
    E.NCCL_ERROR: NCCLISH,
    E.NATIVE_CRASH: NCCLISH,
    E.SILENT_EXIT: NCCLISH,
    E.UNKNOWN: NCCLISH,
    E.PYTHON_ERROR: set(),
    E.STARTUP_ERROR: set(),
    E.PROGRAM_EXIT: set(),
    E.PROGRAM_FAULT: set(),
    E.OUT_OF_MEMORY: set(),
    E.EXIT_CRASH: set(),
}


def test_the_table_covers_every_ending() -> None:
    assert set(RERUNS) == set(Ending)


@pytest.mark.parametrize(
    ("ending", "backend", "detail"),
    list(itertools.product(Ending, Backend, (False, True))),
    ids=lambda v: getattr(v, "name", str(v)),
)
def test_auto_policy_table(ending: Ending, backend: Backend, detail: bool) -> None:
    decision = decide("auto", ending, backend, detail)
    expected = backend in RERUNS[ending] or (
        backend == B.GLOO and detail and GLOO_DETAIL in RERUNS[ending]
    )
    assert decision.run is expected
    assert (decision.ending, decision.backend) == (ending, backend)
    assert "\n" not in decision.reason  # one line
    if not decision.run:  # says why, and how to force one
        assert ending.value in decision.reason
        assert decision.reason.endswith("to rerun anyway: --isolate always")


@pytest.mark.parametrize(("ending", "backend"), list(itertools.product(Ending, Backend)))
def test_always_and_never_override_the_table(ending: Ending, backend: Backend) -> None:
    assert decide("always", ending, backend, False).run is True
    assert decide("never", ending, backend, True).run is False


def _outcome(status: str, *ranks: RankResult) -> Outcome:
    return builders.outcome(status, *ranks)


def _rank(code: int | None = 1, sig: int | None = None) -> RankResult:
    return builders.rank_result(0, exit_code=code, signal=sig)


def _signature(signature_id: str) -> Diagnosis:
    signature = next(s for s in SIGNATURES if s.id == signature_id)
    return Diagnosis(root_cause=_rank(), error=None, signature=signature, klass=signature.klass)


def _error(line: str, sig: int | None = None) -> Diagnosis:
    return Diagnosis(
        root_cause=_rank(sig=sig), error=ErrorText(line=line, location=None, source="log")
    )


@pytest.mark.parametrize(
    ("diagnosis", "ending"),
    [
        (_signature("nccl-system-error"), E.COMMUNICATION),
        (_signature("collective-timeout"), E.COMMUNICATION),
        (_signature("store-connection-lost"), E.COMMUNICATION),
        (_signature("nccl-not-built"), E.NCCL_ERROR),
        (_signature("native-crash"), E.NATIVE_CRASH),
        (_signature("sampler-and-shuffle"), E.PROGRAM_FAULT),
        (_signature("port-in-use"), E.PROGRAM_FAULT),
        (_signature("cuda-out-of-memory"), E.OUT_OF_MEMORY),
        (_signature("killed-sigkill"), E.OUT_OF_MEMORY),
        (_signature("shutdown-crash"), E.EXIT_CRASH),
        (_error("RuntimeError: loss went negative"), E.PYTHON_ERROR),
        (_error("ValueError: bad"), E.PYTHON_ERROR),
        (_error("SyntaxError: invalid syntax"), E.STARTUP_ERROR),
        (_error("ModuleNotFoundError: No module named 'x'"), E.STARTUP_ERROR),
        (_error("SystemExit: 3"), E.PROGRAM_EXIT),
        (
            _error("torch.distributed.DistBackendError: NCCL communicator was aborted"),
            E.COMMUNICATION,
        ),
        (_error("Fatal Python error: Segmentation fault"), E.NATIVE_CRASH),
        (Diagnosis(root_cause=_rank(None, signal.SIGABRT), error=None), E.NATIVE_CRASH),
        (Diagnosis(root_cause=_rank(3), error=None), E.SILENT_EXIT),
    ],
    ids=lambda v: v.name if isinstance(v, Ending) else "",
)
def test_how_a_diagnosis_maps_onto_an_ending(diagnosis: Diagnosis, ending: Ending) -> None:
    assert ending_of(_outcome(AttemptStatus.FAILED, _rank()), diagnosis) is ending


def test_a_hang_is_a_hang_whatever_else_is_known() -> None:
    diagnosis = Diagnosis(root_cause=None, error=None)
    assert ending_of(_outcome(AttemptStatus.HUNG), diagnosis) is E.HANG


@pytest.mark.parametrize(
    ("requested", "used", "attempted", "initialised", "backend"),
    [
        (("nccl",), ("nccl",), True, True, B.NCCL),
        ((), ("cpu:gloo,cuda:nccl",), True, True, B.NCCL),  # torch's default on a CUDA build
        (("nccl",), (), True, False, B.NCCL_NOT_UP),  # a CPU build: init fails
        ((), (), True, False, B.NCCL_NOT_UP),  # default backend, never up: could be NCCL
        (("gloo",), ("gloo",), True, True, B.GLOO),
        (("gloo",), (), True, False, B.GLOO),  # gloo asked for, init never returned
        ((), (), False, False, B.NONE),
    ],
)
def test_backend_from_the_ranks_records(
    requested: tuple[str, ...],
    used: tuple[str, ...],
    attempted: bool,
    initialised: bool,
    backend: Backend,
) -> None:
    assert backend_of(requested, used, attempted, initialised) is backend


@pytest.mark.parametrize("status", [AttemptStatus.SUCCEEDED, AttemptStatus.INTERRUPTED])
def test_only_failures_and_hangs_are_candidates(status: str) -> None:
    diagnosis = Diagnosis(root_cause=None, error=None)
    decision = should_isolate("always", _outcome(status), diagnosis, B.NCCL, True)
    assert decision.run is False and decision.reason == f"the job {status}"


FORCE = "; to rerun anyway: --isolate always"


@pytest.mark.parametrize(
    ("mode", "ending", "backend", "detail", "why", "reason"),
    [
        ("never", E.HANG, B.NCCL, True, Why.NEVER, "--isolate never"),
        ("always", E.PYTHON_ERROR, B.NONE, False, Why.ALWAYS, "--isolate always"),
        (
            "auto",
            E.PYTHON_ERROR,
            B.NCCL,
            True,
            Why.ANY_BACKEND,
            "a Python exception in the program: it fails the same way on any backend" + FORCE,
        ),
        (
            "auto",
            E.NCCL_ERROR,
            B.NCCL_NOT_UP,
            False,
            Why.NCCL_QUESTION,
            "an NCCL error on NCCL: is it the communication layer or the program?",
        ),
        (
            "auto",
            E.HANG,
            B.GLOO,
            True,
            Why.GLOO_HANG_DETAIL,
            "a hang on Gloo: rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to name a collective "
            "the ranks call differently",
        ),
        (
            "auto",
            E.HANG,
            B.GLOO,
            False,
            Why.SAME_BACKEND,
            "a hang, but the job never used NCCL, a rerun on Gloo would repeat the same backend"
            + FORCE,
        ),
        (
            "auto",
            E.SILENT_EXIT,
            B.NONE,
            False,
            Why.NO_PROCESS_GROUP,
            "an exit with no Python error, but the job failed before any process group existed"
            + FORCE,
        ),
    ],
    ids=lambda v: v.name if isinstance(v, Why) else "",
)
def test_every_reason_in_words(
    mode: str, ending: Ending, backend: Backend, detail: bool, why: Why, reason: str
) -> None:
    """report.json's `reason` strings, word for word: the closed Why said as before."""
    decision = decide(mode, ending, backend, detail)
    assert (decision.why, decision.reason) == (why, reason)
