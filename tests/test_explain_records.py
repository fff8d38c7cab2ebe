"""`explain` on records it cannot read: one line, exit 2, never an internal error.

report.json (and flightcheck's JSON) are checked against the shape their readers use
(safelaunch/diagnose/jsonshape.py) where they are read; a path the system cannot take
is refused before anything reads it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hostile import invoke

from safelaunch import exitcodes
from safelaunch.cli import explain_command
from safelaunch.diagnose.jsonshape import INT, OPT_STR, Arr, Map, Obj, Row, mismatch
from safelaunch.diagnose.layouts import REPORT
from safelaunch.flights.forensics import FLIGHTCHECK

TRACEBACK = "Traceback (most recent call last):\nValueError: bad batch\n"
DEEP = b'{"ranks": ' + b"[" * 5000 + b"]" * 5000 + b"}"


def _run_dir(tmp_path: Path, report: bytes | None) -> Path:
    attempt = tmp_path / "run" / "attempt_0"
    attempt.mkdir(parents=True)
    (attempt / "rank0.log").write_text(TRACEBACK)
    if report is not None:
        (attempt / "report.json").write_bytes(report)
    return tmp_path / "run"


def _one_error(where: str) -> str:
    result = invoke(explain_command, [where], env={"SAFELAUNCH_COLOR": "never"})
    assert result.exception is None and "Traceback" not in result.output, result.output
    assert result.exit_code == exitcodes.USAGE, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("safelaunch: error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("report", "why"),
    [
        (b'{"ranks": 3}', "ranks is an integer, not a list"),
        (DEEP, "nested more than 16 levels deep"),
        (b'{"ranks": [{"rank": [1]}]}', "ranks[0].rank is a list, not an integer"),
        (b'{"status": "hung", "hang": {"culprits": "1"}}', "hang.culprits is a string"),
        (b'{"diagnosis": []}', "diagnosis is a list, not an object"),
        (b'{"hang": {"groups": [{"ranks": [0, true]}]}}', "hang.groups[0].ranks[1] is true/false"),
        (b'{"diagnosis": {"leaves": {"0": {"frames": [["a.py", 1]]}}}}', "has 2 items, not 3"),
        (b"[1, 2]", "the record is a list, not an object"),
        (b'{"ranks": [', "not valid JSON"),
        (b'{"status": "\xff"}', "not UTF-8"),
    ],
)
def test_a_malformed_report_is_unreadable_in_one_line(
    tmp_path: Path, report: bytes, why: str
) -> None:
    line = _one_error(str(_run_dir(tmp_path, report)))
    assert "report.json: unreadable: " in line and why in line


def test_a_report_that_is_a_fifo_is_unreadable_without_waiting(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, None)
    os.mkfifo(run / "attempt_0" / "report.json")
    assert "not a regular file" in _one_error(str(run))


@pytest.mark.parametrize("path", ["x" * 5000, "y" * 300], ids=["path", "name"])
def test_a_path_longer_than_the_system_allows_is_one_line(tmp_path: Path, path: str) -> None:
    line = _one_error(str(tmp_path / path))
    assert "cannot be read (File name too long)" in line and len(line) < 400


def test_a_directory_at_the_systems_path_limit_is_one_line(tmp_path: Path) -> None:
    # its own path is fine, `PATH/latest` is past the limit: a probe there must not raise
    deep = tmp_path
    while len(str(deep)) + 241 < 4080:
        deep = deep / ("d" * 240)
    deep = deep / ("e" * (4090 - len(str(deep)) - 1))
    deep.mkdir(parents=True)
    assert "no rankK.log nor attempt_N/<rank>/stdout.log below it" in _one_error(str(deep))


def test_a_report_of_the_right_shape_is_read(tmp_path: Path) -> None:
    report = {
        "status": "failed",
        "exit_code": 1,
        "extra": [[[[{"any": "thing"}]]]],  # fields no reader uses are not checked
        "ranks": [{"rank": 0, "state": "failed", "exit_code": 1, "ended_after_s": float("nan")}],
        "diagnosis": {"leaves": {}, "collectives": None, "next_steps": []},
        "hang": None,
    }
    run = _run_dir(tmp_path, json.dumps(report).encode())
    result = invoke(explain_command, [str(run)], env={"SAFELAUNCH_COLOR": "never"})
    assert result.exit_code == 0, result.output
    assert "root cause: rank 0" in result.stdout and "ValueError: bad batch" in result.stdout


@pytest.mark.parametrize(
    ("value", "shape", "problem"),
    [
        ({"a": [1, 2]}, Obj({"a": Arr(INT)}), None),
        ({"a": None, "b": "x"}, Obj({"a": Arr(INT)}), None),  # null: absent
        ({"a": [1, "2"]}, Obj({"a": Arr(INT)}), "a[1] is a string, not an integer"),
        ({"a": {"k": 1}}, Obj({"a": Map(OPT_STR)}), "a.k is an integer, not a string or null"),
        ([1, 2, 3], Row((INT, INT)), "the record has 3 items, not 2"),
        (True, INT, "the record is true/false, not an integer"),
    ],
)
def test_mismatch_names_where_and_what(value: object, shape: object, problem: str | None) -> None:
    assert mismatch(value, shape) == problem  # type: ignore[arg-type]


def test_flightchecks_json_is_checked_before_it_is_read() -> None:
    good = {"ranks": [0, 1], "divergences": [{"ranks": [0, 1], "seq": 3, "differ": {"1": "x"}}]}
    assert mismatch(good, FLIGHTCHECK) is None
    # a group's ranks come from a record's pg_config, whatever a file below PATH held
    bad = {"ranks": [0, 1], "divergences": [{"ranks": ["0", [1]], "seq": 3}]}
    assert mismatch(bad, FLIGHTCHECK) == "divergences[0].ranks[0] is a string, not an integer"
    assert mismatch({"ranks": 3}, REPORT) == "ranks is an integer, not a list"
