"""Generated input for the launch's parser and for explain's readers (issue 28).

The parser: argv drawn from the real option table (every command's), with hostile.py's
values (`--`, empty, non-ASCII digits, huge and negative numbers, ...): either a usage
error (exit 2, one line) or values of the option's own type, never a list, never a
choice outside its choices. explain: run directories whose report.json is a mutated
report, any JSON, deep nesting or any bytes, and paths that are not run directories:
exit 0 or 2, one error line, never a traceback or exit 70. In-process (the parser and
`explain_command` run here, nothing is launched), a few seconds in all; then a handful
of the same cases through the real process.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import safelaunch_cmd
from hostile import NASTY, _value, explain_path, invoke, report_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safelaunch import exitcodes
from safelaunch.cli import explain_command
from safelaunch.cli.options import LAUNCH_OPTIONS, Spec
from safelaunch.cli.sources import parse_launch
from safelaunch.config import build_config
from safelaunch.errors import SafelaunchError

SETTINGS = settings(
    deadline=None,
    derandomize=True,  # the same cases on every run; bench/fuzz_inputs.py explores further
    database=None,
    suppress_health_check=list(HealthCheck),
)
VALUED = [spec for spec in LAUNCH_OPTIONS if not spec.flag and spec.dest != "config"]
FLAGS = [spec for spec in LAUNCH_OPTIONS if spec.flag]
EDGE = ["--", "", "٤", "１２", "99999999999999999999", "-1", "-0", "1e999"]


@st.composite
def argv(draw: st.DrawFn) -> tuple[list[str], list[tuple[Spec, str]]]:
    """Options from the table, each in one of its spellings, `--opt=V` or `--opt V`."""
    args: list[str] = []
    given_values: list[tuple[Spec, str]] = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 4)) == 0:
            args.append(draw(st.sampled_from([n for s in FLAGS for n in s.names])))
            continue
        spec = draw(st.sampled_from(VALUED))
        name = draw(st.sampled_from(spec.names))
        value = draw(st.one_of(st.sampled_from(EDGE), _value(spec.dest.replace("_", "-"))))
        joined = draw(st.booleans()) or value.startswith("-")
        args += [f"{name}={value}"] if joined else [name, value]
        given_values.append((spec, value))
    return args, given_values


def _parsed(args: list[str]) -> tuple[int, dict[str, Any] | None, str]:
    """(exit code, raw values or None, stderr) of parsing and building the config."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            raw, explicit = parse_launch([*args, "train.py"], {})
            build_config(raw, {}, explicit)
        except SystemExit as done:
            return int(done.code or 0), None, err.getvalue()
        except SafelaunchError as exc:
            return exc.exit_code, None, "safelaunch: error: " + exc.render()  # as finish shows it
    return 0, raw, err.getvalue()


@settings(SETTINGS, max_examples=400)
@given(argv())
def test_the_parser_refuses_or_reads_each_value_as_its_type(
    case: tuple[list[str], list[tuple[Spec, str]]],
) -> None:
    args, given_values = case
    code, raw, said = _parsed(args)
    assert "Traceback" not in said
    if raw is None:
        assert code == exitcodes.USAGE, (args, said)
        errors = [line for line in said.splitlines() if "error" in line]
        assert len(errors) == 1, (args, said)
        return
    assert code == 0, (args, said)
    assert not any(value == "--" for _, value in given_values), (args, raw)
    for spec, _ in given_values:
        value = raw[spec.dest]
        assert isinstance(value, (str, int, float)), (spec.dest, value, args)
        assert spec.choices is None or value in spec.choices, (spec.dest, value)


def _run_dir(where: Path, report: bytes | None, log: bytes) -> Path:
    attempt = where / "run" / "attempt_0"
    attempt.mkdir(parents=True)
    (attempt / "rank0.log").write_bytes(log)
    (attempt / "rank1.log").write_text("[W] connection closed by peer\n")
    if report is not None:
        (attempt / "report.json").write_bytes(report)
    return where / "run"


LOGS = st.one_of(
    st.just(b"Traceback (most recent call last):\nValueError: bad batch\n"),
    st.binary(max_size=200),
    st.sampled_from(NASTY).map(lambda s: s.encode("utf-8", "surrogateescape")),
)


@settings(SETTINGS, max_examples=250)
@given(st.one_of(st.none(), report_bytes()), LOGS, explain_path())
def test_explain_reads_any_record_or_says_in_one_line_why_not(
    tmp_path_factory: pytest.TempPathFactory, report: bytes | None, log: bytes, path: str
) -> None:
    run = _run_dir(tmp_path_factory.mktemp("explain"), report, log)
    where = path.replace("@run", str(run))
    result = invoke(explain_command, [where], env={"SAFELAUNCH_COLOR": "never"})
    shown = (where[:80], report and report[:200], result.output[-600:])
    assert result.exception is None, shown
    assert "Traceback" not in result.output and "internal error" not in result.output, shown
    assert result.exit_code in (exitcodes.SUCCESS, exitcodes.USAGE), shown
    if result.exit_code == exitcodes.USAGE:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("safelaunch: error: "), shown


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--isolate-timeout=--", "@script"], "argument --isolate-timeout: expected one argument"),
        (["--color=--", "@script"], "argument --color: expected one argument"),
        (["explain", "@ranks"], "unreadable: ranks is an integer, not a list"),
        (["explain", "@deep"], "unreadable: nested more than 16 levels deep"),
        (["explain", "x" * 5000], "cannot be read (File name too long)"),
    ],
)
def test_the_same_cases_through_the_real_process(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    files = {
        "@script": str(script),
        "@ranks": str(_run_dir(tmp_path / "a", b'{"ranks": 3}', b"")),
        "@deep": str(
            _run_dir(tmp_path / "b", b'{"ranks": ' + b"[" * 9000 + b"]" * 9000 + b"}", b"")
        ),
    }
    env = {**os.environ, "SAFELAUNCH_COLOR": "never"}
    argv = [files.get(a, a) for a in args]
    proc = subprocess.run(
        safelaunch_cmd(*argv), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == exitcodes.USAGE, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and needle in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "safelaunch_logs").exists()
