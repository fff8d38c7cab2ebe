"""Judging attempts (replayed records) and rendering the summary."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import builders
import pytest

from safelaunch.diagnose import diagnose
from safelaunch.diagnose.errortext import parse_traceback
from safelaunch.diagnose.signatures import SIGNATURES
from safelaunch.outcome import AttemptStatus, RankEnding, attempt_status, outcome_of
from safelaunch.plan import LaunchPlan, RunIdentity
from safelaunch.ranktext import ranks_label
from safelaunch.rendezvous import stops
from safelaunch.rendezvous.stops import NodeStop
from safelaunch.report import render_summary
from safelaunch.report_json import report_record
from safelaunch.supervisor import AttemptRecord, RankExit
from safelaunch.supervisor.teardown import TeardownCause
from safelaunch.vocab import CLASSES

RUN = RunIdentity(
    run_id="r", run_dir=Path("/l/r"), token="t", private_dir=Path("/p"), launcher_pid=1
)
PLAN = LaunchPlan(
    run=RUN,
    attempt=0,
    attempt_dir=Path("/l/r/attempt_0"),
    workers=(),
    split_streams=False,
    duplicate_filters={},
    shutdown_timeout=30,
    monitor_interval=0.1,
    color=False,
    env_choices=(),
    heartbeat_dir=Path("/p/attempt_0"),
    hang_timeout=300.0,
    heartbeat_interval=2.0,
)


def _exit(rank: int, returncode: int, at: float) -> RankExit:
    return builders.rank_exit(rank, returncode=returncode, ended_after=at)


def _record(
    exits: list[RankExit],
    teardown: float | None,
    cause: TeardownCause | None = None,
    signum: int | None = None,
) -> AttemptRecord:
    return AttemptRecord(
        plan=PLAN,
        exits=tuple(exits),
        teardown_after=teardown,
        teardown_cause=cause,
        interrupt_signal=signum,
        hang=None,
        strays_ended=0,
        log_problems=(),
        duration=2.0,
    )


def test_earliest_failure_is_the_root_cause_and_killed_ranks_are_not_failures() -> None:
    record = _record(
        [_exit(0, -15, 1.3), _exit(1, 1, 1.21), _exit(2, -11, 1.2), _exit(3, 0, 0.5)],
        teardown=1.25,
        cause=TeardownCause.RANK_FAILED,
    )
    outcome = outcome_of(record)
    assert [r.state for r in outcome.ranks] == [
        RankEnding.STOPPED,
        RankEnding.FAILED,
        RankEnding.FAILED,
        RankEnding.SUCCEEDED,
    ]
    assert outcome.first_failure is not None and outcome.first_failure.rank == 2
    assert outcome.exit_code == 139
    text = render_summary(outcome, diagnose(outcome))
    assert text.splitlines()[0].startswith("FAILED: rank 2 died of SIGSEGV (exit 139)")
    assert "rank 0: stopped by safelaunch (SIGTERM)" in text
    assert "rank 1: exited with code 1" in text


def test_interrupt_exit_code_is_128_plus_signal() -> None:
    outcome = outcome_of(
        _record([_exit(0, -2, 1.0)], teardown=0.9, cause=TeardownCause.SIGNAL, signum=2)
    )
    assert (outcome.status, outcome.exit_code) == ("interrupted", 130)
    assert render_summary(outcome, diagnose(outcome)).startswith("interrupted by SIGINT")


@pytest.mark.parametrize(
    ("announced", "status", "code"),
    [
        (stops.interrupted(1, 0, 15), "interrupted", 143),
        (stops.interrupted(1, 0, 2), "interrupted", 130),
        (stops.rank_failed(1, 0, 3, 1), "failed", 1),
        (stops.nodes_joining(1, 0, 1), "rescaled", 0),  # elastic: not a failure
    ],
)
def test_a_node_stopped_by_a_peer_takes_the_peers_reason(
    announced: NodeStop, status: str, code: int
) -> None:
    record = replace(
        _record([_exit(0, -15, 1.0), _exit(1, -15, 1.0)], teardown=0.9, cause=TeardownCause.PEER),
        peer_event=announced,
    )
    outcome = outcome_of(record)
    assert (outcome.status, outcome.exit_code) == (status, code)
    assert {r.state for r in outcome.ranks} == {RankEnding.STOPPED}


@pytest.mark.parametrize(
    ("ranks", "label"),
    [
        ([0], "rank 0"),
        ([3, 3], "rank 3"),
        ([1, 0], "ranks 0,1"),
        ([5, 0, 1, 2], "ranks 0-2,5"),
        ([], "no rank"),
        (["x"], "rank x"),  # read back from a file: written as given
        ([0, "x"], "ranks 0,x"),
    ],
)
def test_a_rank_list_is_written_one_way(ranks: list[object], label: str) -> None:
    assert ranks_label(ranks) == label


def test_many_ranks_fold_into_ranges() -> None:
    exits = [_exit(r, -15, 2.0) for r in range(64)]
    exits[17] = _exit(17, 1, 1.0)
    outcome = outcome_of(_record(exits, teardown=1.1, cause=TeardownCause.RANK_FAILED))
    text = render_summary(outcome, diagnose(outcome))
    assert "ranks 0-16,18-63: stopped by safelaunch (SIGTERM)" in text
    assert len(text.splitlines()) < 8


def test_traceback_parsing_points_at_user_code_and_strips_rank_markers() -> None:
    log = "\n".join(
        [
            "some output",
            "[rank3]: Traceback (most recent call last):",
            '[rank3]:   File "/home/u/train.py", line 57, in <module>',
            "[rank3]:     main()",
            '[rank3]:   File "/venv/lib/python3.11/site-packages/torch/nn/module.py", line 9, in f',
            "[rank3]:     ^^^^",
            "[rank3]: RuntimeError: Expected all tensors to be on the same device",
        ]
    )
    assert parse_traceback(log) == (
        "RuntimeError: Expected all tensors to be on the same device",
        "/home/u/train.py:57 in <module>",
    )
    assert parse_traceback("no traceback here") is None


def test_statuses_and_classes_are_closed_vocabularies_written_as_before() -> None:
    """str Enums: report.json keeps the plain strings; a name read back is the member."""
    assert tuple(AttemptStatus) == (
        "succeeded", "failed", "hung", "interrupted", "passed", "timeboxed", "rescaled",
    )  # fmt: skip
    assert tuple(RankEnding) == ("succeeded", "failed", "stopped", "not started")
    assert attempt_status("hung") is AttemptStatus.HUNG
    ending = RankEnding.NOT_STARTED
    assert (str(ending), f"{ending}", f"{ending:>12}", " ".join([ending])) == (
        "not started", "not started", " not started", "not started",
    )  # fmt: skip
    assert json.dumps({ending: [ending]}) == '{"not started": ["not started"]}'
    assert json.dumps([ending], indent=1) == '[\n "not started"\n]'
    with pytest.raises(ValueError, match="not an attempt status"):
        attempt_status("sucess")
    assert CLASSES == (
        "environment/launch", "communication", "data/sampling", "model/gradient",
        "resources", "unknown",
    )  # fmt: skip
    assert {s.klass for s in SIGNATURES} <= set(CLASSES)
    outcome = outcome_of(
        _record([_exit(0, -2, 1.0), _exit(1, 0, 0.5)], 0.9, TeardownCause.SIGNAL, signum=2)
    )
    written = json.loads(json.dumps(report_record(outcome, diagnose(outcome), "r", 0)))
    assert written["status"] == "interrupted" and written["attempts"][0]["status"] == "interrupted"
    assert [r["state"] for r in written["ranks"]] == ["stopped", "succeeded"]


def _enum_bases(tree: ast.Module) -> list[tuple[str, str]]:
    """(class, base) for each class of the module deriving from an enum type by name."""
    enums = {"Enum", "IntEnum", "Flag", "IntFlag", "StrEnum"}
    return [
        (node.name, ast.unparse(base))
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        for base in node.bases
        if (base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")) in enums
    ]


def test_every_closed_vocabulary_is_a_vocab_strenum() -> None:
    """One idiom: no module-level Literal, and every Enum derives from vocab.StrEnum."""
    package = Path(__file__).parents[1] / "safelaunch"
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text())
        where = path.relative_to(package).as_posix()
        for node in tree.body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(value, ast.Subscript) and ast.unparse(value.value) == "Literal":
                found.append(f"{where}: a Literal vocabulary")
        for name, base in _enum_bases(tree):
            if base != "StrEnum" and (where, name) != ("vocab.py", "StrEnum"):
                found.append(f"{where}: {name}({base})")
    assert found == []


def test_ranks_ending_within_a_millisecond_tie_as_in_report_json() -> None:
    """The live verdict judges end times at report.json's precision, which `explain` reads:
    rank 1 ending 0.2 ms before rank 0 is a tie there, and a tie goes to the lower rank,
    both ways (zoo env_import_missing: both ranks fail alike at once)."""
    record = _record([_exit(0, 1, 1.2344), _exit(1, 1, 1.2342)], teardown=None)
    outcome = outcome_of(record)
    assert [r.ended_after for r in outcome.ranks] == [1.234, 1.234]
    assert outcome.first_failure is not None and outcome.first_failure.rank == 0
    report = report_record(outcome, diagnose(outcome, SIGNATURES), "r", 0, None)
    assert [r["ended_after_s"] for r in report["ranks"]] == [1.234, 1.234]
