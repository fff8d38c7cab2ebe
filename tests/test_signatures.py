"""The knowledge base: every signature has a fixture that it, and only it, explains first."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import builders
import pytest
from conftest import cli, launch, worker

from safelaunch.diagnose import diagnose
from safelaunch.diagnose.match import cause, matches, non_finite_loss
from safelaunch.diagnose.signatures import SIGNATURES
from safelaunch.outcome import AttemptStatus, Outcome, RankEnding, RankResult
from safelaunch.report import render_summary
from safelaunch.report_json import REPORT_SCHEMA, report_record

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
PATTERNED = [s for s in SIGNATURES if s.patterns]


def test_ids_are_unique_and_every_signature_says_what_to_do() -> None:
    assert len({s.id for s in SIGNATURES}) == len(SIGNATURES)
    for signature in SIGNATURES:
        assert signature.meaning and 1 <= len(signature.next_steps) <= 4, signature.id


@pytest.mark.parametrize("signature", PATTERNED, ids=lambda s: s.id)
def test_each_fixture_is_explained_by_its_signature_first(signature) -> None:
    text = (FIXTURES / f"{signature.id}.log").read_text()
    found = matches(text, None)
    assert found and found[0].signature.id == signature.id
    assert found[0].line and not found[0].line.startswith("[rank")  # torch's marker dropped


@pytest.mark.parametrize(
    ("signum", "expected"),
    [
        (signal.SIGKILL, "killed-sigkill"),
        (signal.SIGSEGV, "native-crash"),
        (signal.SIGBUS, "native-crash"),
    ],
)
def test_signals(signum: int, expected: str) -> None:
    assert matches("", signum)[0].signature.id == expected


def test_consequences_are_never_a_cause() -> None:
    text = (FIXTURES / "peer-connection-closed.log").read_text()
    assert cause(matches(text, None)) is None


def test_non_finite_loss_lines() -> None:
    assert non_finite_loss("step 3 loss nan\n") == "step 3 loss nan"
    assert non_finite_loss("[rank1]: {'loss': inf, 'lr': 0.1}") == "{'loss': inf, 'lr': 0.1}"
    assert non_finite_loss("loss 0.25 (finite)\nnanny\n") is None


def _result(rank: int, at: float, log: Path, code: int = 1) -> RankResult:
    return builders.rank_result(rank, exit_code=code, ended_after=at, log=log)


def _outcome(tmp_path: Path, ranks: list[RankResult]) -> Outcome:
    first = min(ranks, key=lambda r: r.ended_after)
    return Outcome(
        attempt=0,
        status=AttemptStatus.FAILED,
        ranks=tuple(ranks),
        first_failure=first,
        interrupt_signal=None,
        exit_code=first.shell_code,
        duration=2.0,
        strays_ended=0,
        log_problems=(),
        run_dir=tmp_path,
        attempt_dir=tmp_path,
    )


def test_a_survivor_that_failed_first_only_because_of_a_peer_is_not_the_root_cause(
    tmp_path: Path,
) -> None:
    survivor = tmp_path / "rank0.log"
    survivor.write_text((FIXTURES / "peer-connection-closed.log").read_text())
    culprit = tmp_path / "rank1.log"
    culprit.write_text((FIXTURES / "ddp-unused-parameters.log").read_text())
    outcome = _outcome(tmp_path, [_result(0, 1.00, survivor), _result(1, 1.02, culprit, code=7)])
    diagnosis = diagnose(outcome)
    assert diagnosis.root_cause is not None and diagnosis.root_cause.rank == 1
    assert diagnosis.klass == "model/gradient"
    assert diagnosis.consequences == ((0, "peer-connection-closed"),)
    text = render_summary(outcome, diagnosis)
    assert text.startswith("FAILED: rank 1 exited with code 7")
    assert "class: model/gradient (ddp-unused-parameters)" in text
    assert "next:  use every parameter in the loss" in text
    assert "rank 0: failed as a consequence (peer-connection-closed), not a cause" in text
    assert "exit code 7 (rank 1's own code)" in text


def test_report_json_has_the_documented_shape(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text((FIXTURES / "sampler-and-shuffle.log").read_text() + "step 1 loss nan\n")
    outcome = _outcome(tmp_path, [_result(0, 0.5, log)])
    record = report_record(outcome, diagnose(outcome), "run-1", max_restarts=2)
    schema = json.loads((Path(__file__).parents[1] / "docs" / "report.schema.json").read_text())
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(record, schema)
    assert record["schema"] == REPORT_SCHEMA
    assert record["diagnosis"]["class"] == "data/sampling"
    assert record["diagnosis"]["signature"] == "sampler-and-shuffle"
    assert record["diagnosis"]["location"].endswith("scenario.py:7 in <module>")  # captured
    assert record["diagnosis"]["error_source"] == "log"
    assert record["diagnosis"]["non_finite_losses"] == [{"rank": 0, "line": "step 1 loss nan"}]


def test_shutdown_crash_after_the_work_vs_after_a_python_error(tmp_path: Path) -> None:
    log = tmp_path / "rank1.log"
    log.write_text((FIXTURES / "shutdown-crash.log").read_text())
    aborted = RankResult(
        rank=1,
        local_rank=1,
        pid=11,
        state=RankEnding.FAILED,
        exit_code=None,
        signal=signal.SIGABRT,
        ended_after=2.0,
        log_path=log,
        error_file=tmp_path / "none.json",
    )
    diagnosis = diagnose(_outcome(tmp_path, [aborted]))
    assert diagnosis.signature is not None and diagnosis.signature.id == "shutdown-crash"
    assert "not a training failure" in render_summary(_outcome(tmp_path, [aborted]), diagnosis)
    assert not diagnosis.crashed_at_exit  # faulthandler's "Fatal Python error" is the crash itself

    log.write_text(
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/home/u/train.py", line 52, in main\n'
        "[rank1]: RuntimeError: injected failure on rank 1 at step 2\n"
        + (FIXTURES / "shutdown-crash.log").read_text()
    )
    diagnosis = diagnose(_outcome(tmp_path, [aborted]))
    assert diagnosis.crashed_at_exit and diagnosis.signature is None
    text = render_summary(_outcome(tmp_path, [aborted]), diagnosis)
    assert "error: RuntimeError: injected failure on rank 1 at step 2" in text
    assert "then:  it crashed at exit" in text


USER_SIGNATURES = """
[[signature]]
id = "shard-missing"
class = "data/sampling"
patterns = ["ShardNotFound: shard \\\\d+"]
meaning = "a data shard is missing from the bucket"
next_steps = ["re-run the export job for that shard"]
"""


def test_user_signatures_are_matched_first(tmp_path: Path) -> None:
    (tmp_path / "sigs.toml").write_text(USER_SIGNATURES)
    script = tmp_path / "shard.py"
    script.write_text(
        "import sys\nprint('ShardNotFound: shard 17', file=sys.stderr)\nsys.exit(3)\n"
    )
    run = launch(tmp_path, "--signatures", str(tmp_path / "sigs.toml"), str(script))
    assert run.returncode == 3
    assert "class: data/sampling (shard-missing): a data shard is missing" in run.stderr
    assert "next:  re-run the export job for that shard" in run.stderr


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("[[signature]]\nid = 'x'\npatterns = ['a']\n", "has no 'meaning'"),
        ("[[signature]]\nid = 'x'\nmeaning = 'm'\npatterns = ['(']\n", "signature 1:"),
        ("[[signature]]\nid = 'x'\nmeaning = 'm'\npatterns = ['a']\nclass = 'gpu'\n", "not one of"),
        ("[[signature]\n", "not valid TOML"),
    ],
)
def test_bad_signature_files_stop_before_anything_starts(
    tmp_path: Path, content: str, needle: str
) -> None:
    (tmp_path / "sigs.toml").write_text(content)
    result = cli(tmp_path, "--signatures", str(tmp_path / "sigs.toml"), worker("dump_env.py"))
    assert result.returncode == 2
    assert needle in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "logs").exists() and not list((tmp_path / "pids").iterdir())
