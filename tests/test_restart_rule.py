"""The restart rule (safelaunch/restarts/rule.py) over generated attempt histories."""

from __future__ import annotations

import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safelaunch import exitcodes
from safelaunch.diagnose.layerclass import LAYER_RULES
from safelaunch.diagnose.pytypes import EXCEPTION_TYPES, RANK_LEFT_EARLY
from safelaunch.diagnose.signatures import SIGNATURES
from safelaunch.restarts.facts import exception_type
from safelaunch.restarts.rule import (
    DETERMINISTIC_EXCEPTIONS,
    DETERMINISTIC_SIGNATURES,
    OUTSIDE_SIGNALS,
    TRANSIENT_SIGNATURES,
    AttemptFacts,
    Persistence,
    RestartPolicy,
    Why,
    decide,
    persistence_of,
)

KNOWN_IDS = {s.id for s in (*SIGNATURES, *EXCEPTION_TYPES, RANK_LEFT_EARLY)} | {
    f"layer-{rule.id}" for rule in LAYER_RULES
}
ANY_ID = sorted(KNOWN_IDS)
SIGNALS = [None, signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV, signal.SIGABRT]
EXCEPTIONS = [None, "ValueError", "RuntimeError", *sorted(DETERMINISTIC_EXCEPTIONS)]


def test_the_tables_name_real_signatures_and_do_not_overlap() -> None:
    assert DETERMINISTIC_SIGNATURES <= KNOWN_IDS
    assert TRANSIENT_SIGNATURES <= KNOWN_IDS
    assert not DETERMINISTIC_SIGNATURES & TRANSIENT_SIGNATURES


@st.composite
def failures(draw: st.DrawFn, attempt: int) -> AttemptFacts:
    """One failed attempt: a few ranks, places and steps, so that repeats are common."""
    return AttemptFacts(
        attempt=attempt,
        hung=draw(st.booleans()),
        rank=draw(st.none() | st.integers(0, 2)),
        signature=draw(st.none() | st.sampled_from(ANY_ID)),
        exception=draw(st.sampled_from(EXCEPTIONS)),
        location=draw(st.sampled_from([None, "train.py:9 in main", "model.py:3 in forward"])),
        signum=draw(st.sampled_from(SIGNALS)),
        step=draw(st.none() | st.integers(0, 3)),
        node_lost=draw(st.booleans()),
    )


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[AttemptFacts], int]:
    """Failed attempts 0..n of a job and its --max-restarts (n <= max_restarts)."""
    max_restarts = draw(st.integers(0, 4))
    count = draw(st.integers(1, max_restarts + 1))
    return [draw(failures(n)) for n in range(count)], max_restarts


@settings(max_examples=100, deadline=None)
@given(histories())
def test_always_is_torchrun_and_never_restarts_nothing(history: tuple) -> None:  # type: ignore[type-arg]
    attempts, max_restarts = history
    always = decide(RestartPolicy.ALWAYS, attempts, max_restarts)
    assert always.restart == (attempts[-1].attempt < max_restarts)
    assert always.code is None  # torchrun's codes: the root cause's own
    never = decide(RestartPolicy.NEVER, attempts, max_restarts)
    assert not never.restart and never.code is None and never.why == Why.POLICY_NEVER


@settings(max_examples=200, deadline=None)
@given(histories())
def test_auto_restarts_only_what_may_not_repeat(history: tuple) -> None:  # type: ignore[type-arg]
    attempts, max_restarts = history
    latest, previous = attempts[-1], (attempts[-2] if len(attempts) > 1 else None)
    decision = decide(RestartPolicy.AUTO, attempts, max_restarts)
    persistence, _ = persistence_of(latest)
    assert decision.restart <= decide(RestartPolicy.ALWAYS, attempts, max_restarts).restart
    if latest.attempt >= max_restarts:  # spent: a scheduler hears whether a requeue may help
        assert decision.why == Why.SPENT and not decision.restart
        expected = persistence == Persistence.TRANSIENT and max_restarts > 0
        assert decision.code == (exitcodes.REQUEUE if expected else None)
        return
    deterministic = (
        latest.signature in DETERMINISTIC_SIGNATURES or latest.exception in DETERMINISTIC_EXCEPTIONS
    )
    repeated = previous is not None and (
        (
            latest.where == previous.where
            and (latest.exception or latest.signature)
            and (latest.location or latest.step is not None)
        )
        or (latest.step is not None and latest.step == previous.step)
    )
    assert decision.restart == (not deterministic and not repeated), decision
    if not decision.restart:  # ended early: never requeue it
        assert decision.code == exitcodes.NO_REQUEUE and decision.requeue is False
    else:
        assert decision.code is None


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 4), st.data())
def test_a_job_that_fails_the_same_way_stops_after_at_most_two_attempts(
    max_restarts: int, data: st.DataObject
) -> None:
    """The same failure every attempt (a known place): auto runs it at most twice."""
    first = AttemptFacts(
        **{**_fields(data.draw(failures(0))), "location": "train.py:9", "exception": "KeyError"}
    )
    attempts: list[AttemptFacts] = []
    for n in range(max_restarts + 1):
        attempts.append(AttemptFacts(**{**_fields(first), "attempt": n}))
        if not decide(RestartPolicy.AUTO, attempts, max_restarts).restart:
            break
    assert len(attempts) <= 2


def _fields(facts: AttemptFacts) -> dict[str, object]:
    return {name: getattr(facts, name) for name in AttemptFacts.__slots__}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("facts", "persistence"),
    [
        (AttemptFacts(attempt=0, signature="shape-mismatch", klass="model"), "deterministic"),
        (AttemptFacts(attempt=0, signature="state-dict-mismatch"), "deterministic"),
        (AttemptFacts(attempt=0, exception="SyntaxError"), "deterministic"),
        (AttemptFacts(attempt=0, signature="python-import-error"), "deterministic"),
        (AttemptFacts(attempt=0, signature="killed-sigkill", signum=signal.SIGKILL), "transient"),
        (AttemptFacts(attempt=0, signature="layer-network-errno"), "transient"),
        (AttemptFacts(attempt=0, signature="collective-timeout"), "transient"),
        (AttemptFacts(attempt=0, node_lost=True), "transient"),
        (AttemptFacts(attempt=0, rank=1, signum=signal.SIGTERM), "transient"),
        (AttemptFacts(attempt=0, signum=signal.SIGSEGV), "unknown"),
        (AttemptFacts(attempt=0, exception="ValueError"), "unknown"),
    ],
)
def test_persistence_table(facts: AttemptFacts, persistence: str) -> None:
    assert persistence_of(facts)[0] == persistence


def test_outside_signals_are_not_crashes() -> None:
    assert not OUTSIDE_SIGNALS & {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE}


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("ModuleNotFoundError: No module named 'x'", "ModuleNotFoundError"),
        ("torch.OutOfMemoryError: CUDA out of memory", "OutOfMemoryError"),
        ("  SyntaxError: invalid syntax", "SyntaxError"),
        ("KeyboardInterrupt", None),
        ("Killed", None),
        (None, None),
    ],
)
def test_exception_type_of_an_error_line(line: str | None, name: str | None) -> None:
    assert exception_type(line) == name
