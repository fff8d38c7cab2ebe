"""Table tests for torchrun's value formats."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from hostile import invoke

from safelaunch import defaults, exitcodes
from safelaunch.cli import status_command
from safelaunch.cli.options import LAUNCH_OPTIONS, OWN_SECTION, launch_parser
from safelaunch.cli.sources import parse_launch
from safelaunch.config import (
    STD_ALL,
    STD_ERR,
    STD_NONE,
    STD_OUT,
    LaunchConfig,
    build_config,
    parse_filters,
    parse_nnodes,
    parse_nproc,
    parse_rdzv_conf,
    parse_signals,
    parse_streams,
)
from safelaunch.errors import ConfigError


@pytest.mark.parametrize(("text", "expected"), [("1", (1, 1)), ("1:1", (1, 1)), ("2:4", (2, 4))])
def test_nnodes(text: str, expected: tuple[int, int]) -> None:
    assert parse_nnodes(text) == expected


@pytest.mark.parametrize("text", ["0", "a", "1:2:3", "3:1", "-1", ""])
def test_nnodes_rejected(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_nnodes(text)


@pytest.mark.parametrize(
    ("text", "expected"), [("4", 4), ("GPU", "gpu"), ("cpu", "cpu"), ("auto", "auto")]
)
def test_nproc(text: str, expected: int | str) -> None:
    assert parse_nproc(text) == expected


def test_streams_single_value_and_mapping() -> None:
    both = parse_streams("-r", "3")
    assert [both.for_rank(r) for r in range(3)] == [STD_ALL] * 3
    mapped = parse_streams("-r", "0:1,2:2")
    assert [mapped.for_rank(r) for r in range(4)] == [STD_OUT, STD_NONE, STD_ERR, STD_NONE]


@pytest.mark.parametrize("text", ["4", "0:4", "10:1", "0:1,", "a"])
def test_streams_rejected_like_torchrun(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_streams("-r", text)


def test_filters_double_comma_is_a_literal_comma() -> None:
    assert parse_filters("apple,orange") == ("apple", "orange")
    assert parse_filters("a,,b,c") == ("a,b", "c")
    assert parse_filters("") == ()


def test_rdzv_conf_and_signals() -> None:
    assert dict(parse_rdzv_conf("timeout=900, join_timeout=5")) == {
        "timeout": "900",
        "join_timeout": "5",
    }
    with pytest.raises(ConfigError):
        parse_rdzv_conf("timeout")
    assert parse_signals("SIGTERM,usr1") == (signal.SIGTERM, signal.SIGUSR1)


class _Stream:
    def __init__(self, tty: bool) -> None:
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_colour_auto_means_a_terminal_without_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    from safelaunch.console import color_wanted

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert color_wanted("auto", _Stream(True))  # type: ignore[arg-type]
    assert not color_wanted("auto", _Stream(False))  # type: ignore[arg-type]
    assert color_wanted("always", _Stream(False))  # type: ignore[arg-type]
    monkeypatch.setenv("NO_COLOR", "1")
    assert not color_wanted("auto", _Stream(True))  # type: ignore[arg-type]


RECORD = LaunchConfig(training_script="train.py")  # every field at its default


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No option from this environment: only the defaults."""
    for name in list(os.environ):
        if name.startswith(("PET_", "SAFELAUNCH_", "SLURM_", "TORCH_ELASTIC")):
            monkeypatch.delenv(name)


def _raw(*argv: str) -> dict[str, Any]:
    """The launch command's raw values for `argv`, as the CLI hands them to build_config."""
    raw, _ = parse_launch([*argv, "train.py"], os.environ)
    return {**raw, "color": False}  # the command resolves auto/always/never to a bool


@pytest.mark.usefixtures("clean_env")
def test_cli_record_and_build_config_share_their_defaults() -> None:
    assert build_config(_raw(), {}, frozenset()) == RECORD
    # A caller that leaves safelaunch's own options out gets the same from build_config.
    own = {spec.dest for spec in LAUNCH_OPTIONS if spec.section == OWN_SECTION}
    torchrun_only = {k: v for k, v in _raw().items() if k not in own}
    assert build_config(torchrun_only, {}) == RECORD
    # The values are safelaunch.defaults' (a sample: the timeouts and the log directory).
    assert (RECORD.hang_timeout, RECORD.isolate_timeout, RECORD.shutdown_timeout) == (
        defaults.HANG_TIMEOUT_S,
        defaults.ISOLATE_TIMEOUT_S,
        defaults.SHUTDOWN_TIMEOUT_S,
    )
    assert RECORD.log_dir == Path(defaults.LOG_DIR)


def _help_entries(text: str) -> list[str]:
    """--help's option entries, each on one line: `--a, --a_b METAVAR  help [default: X]`."""
    entries: list[str] = []
    for line in text.splitlines():
        if line.startswith("  -"):
            entries.append(line.strip())
        elif line.startswith("   ") and entries:
            entries[-1] += " " + line.strip()  # the help text, wrapped
        elif not line.startswith("  "):
            entries.append("")  # a section's end
    return [entry for entry in entries if entry]


@pytest.mark.usefixtures("clean_env")
def test_help_shows_the_defaults_the_record_has() -> None:
    """Each `[default: X]` in --help, given back as --flag=X, yields the record's default."""
    text = launch_parser().format_help()
    checked = []
    for entry in _help_entries(text):
        shown = re.search(r"\[default: ([^\]]*)\]", entry)
        flag = next(word.rstrip(",") for word in entry.split() if word.startswith("--"))
        name = flag[2:].replace("-", "_")
        if shown is None or getattr(RECORD, name, None) is None:
            continue  # no default shown, or one the record leaves open (master_addr, ...)
        value = "" if shown[1] == '""' else shown[1]
        config = build_config(_raw(f"{flag}={value}"), {}, frozenset())
        assert getattr(config, name) == getattr(RECORD, name), name
        checked.append(name)
    assert {"nnodes", "hang_timeout", "isolate_timeout", "shutdown_timeout", "log_dir"} <= set(
        checked
    )
    assert len(checked) >= 22  # every option that shows a default the record holds
    assert f"[default: {defaults.MASTER_ADDR}]" in text
    status_help = invoke(status_command, ["--help"]).stdout
    assert f"[default: {RECORD.log_dir}]" in status_help


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("argv", "name", "value", "script_args"),
    [
        # torchrun's argparse takes a flag's unambiguous abbreviation; both spellings of
        # one flag are one flag (`--nproc`), so we take it too.
        (["--max-rest=2", "t.py"], "max_restarts", 2, ()),
        (["--nproc", "2", "t.py"], "nproc_per_node", "2", ()),
        (["--nproc_per_n=3", "t.py"], "nproc_per_node", "3", ()),
        # Everything after the script is the script's: never a flag, an abbreviation,
        # nor an ambiguous prefix. The first `--` is argparse's, as in torchrun (right
        # after the script too); a later one is the script's.
        (["t.py", "--standalone", "--no", "--nproc", "3"], "standalone", False, None),
        (["t.py", "--", "-h"], "training_script", "t.py", ("-h",)),
        (["--", "t.py", "--", "-h"], "training_script", "t.py", ("--", "-h")),
        (["t.py", "a", "--", "-h"], "training_script", "t.py", ("a", "--", "-h")),
        (["--", "t.py", "x"], "training_script", "t.py", ("x",)),
        (["-m", "pkg.mod", "--x"], "module", True, ("--x",)),
    ],
)
def test_the_command_line_reads_as_torchrun_reads_it(
    argv: list[str], name: str, value: object, script_args: tuple[str, ...] | None
) -> None:
    raw, _ = parse_launch(argv, {})
    assert raw[name] == value
    expected = tuple(argv[1:]) if script_args is None else script_args
    assert raw["training_script_args"] == expected


def test_an_ambiguous_or_unknown_flag_before_the_script_is_a_usage_error() -> None:
    from safelaunch.cli import launch_command

    ambiguous = invoke(launch_command, ["--no", "t.py"])
    assert ambiguous.exit_code == exitcodes.USAGE
    assert "ambiguous option: --no could match --no-python" in ambiguous.stderr
    unknown = invoke(launch_command, ["--nproc_per_nodes=2", "t.py"])
    assert unknown.exit_code == exitcodes.USAGE and "Did you mean" in unknown.stderr


@pytest.mark.usefixtures("clean_env")
def test_each_value_comes_from_the_first_source_that_has_it(tmp_path: Path) -> None:
    """Command line, then the variable, then --config, then the default; all but the
    default are `explicit` (build_config lets SLURM fill in only the others)."""
    config = tmp_path / "job.toml"
    config.write_text('max_restarts = 1\nrole = "file"\nhang-timeout = 9\nstrict = true\n')
    environ = {"PET_MAX_RESTARTS": "2", "PET_ROLE": "env", "PET_NNODES": "", "SAFELAUNCH_X": "1"}
    raw, explicit = parse_launch(["--config", str(config), "--role=cli", "t.py"], environ)
    assert (raw["role"], raw["max_restarts"], raw["hang_timeout"], raw["strict"]) == (
        "cli",
        2,
        9.0,
        True,
    )
    assert raw["nnodes"] == "1:1"  # an empty variable is unset
    assert explicit == {"role", "max_restarts", "hang_timeout", "strict", "training_script"}
    # Through the option's own type, wherever the text came from.
    from safelaunch.cli import launch_command

    config.write_text('max_restarts = "1_000"\n')
    for environ in ({"PET_MAX_RESTARTS": "٣"}, {"SAFELAUNCH_CONFIG": str(config)}):
        refused = invoke(launch_command, ["t.py"], env=environ)
        assert refused.exit_code == exitcodes.USAGE, refused.stderr
        assert "--max-restarts/--max_restarts: '" in refused.stderr
        assert "is not a valid integer (from " in refused.stderr
