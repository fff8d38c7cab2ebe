"""Table tests for torchrun's value formats."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import click
import pytest

from safelaunch import defaults
from safelaunch.cli import command, status_command
from safelaunch.cli.options import OWN_SECTION
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
    """The launch command's raw values for `argv`, as click hands them to build_config."""
    params = command.make_context("safelaunch", [*argv, "train.py"]).params
    return {**params, "color": False}  # the command resolves auto/always/never to a bool


@pytest.mark.usefixtures("clean_env")
def test_cli_record_and_build_config_share_their_defaults() -> None:
    assert build_config(_raw(), {}, frozenset()) == RECORD
    # A caller that leaves safelaunch's own options out gets the same from build_config.
    own = {p.name for p in command.params if getattr(p, "section", None) == OWN_SECTION}
    torchrun_only = {k: v for k, v in _raw().items() if k not in own}
    assert build_config(torchrun_only, {}) == RECORD
    # The values are safelaunch.defaults' (a sample: the timeouts and the log directory).
    assert (RECORD.hang_timeout, RECORD.isolate_timeout, RECORD.shutdown_timeout) == (
        defaults.HANG_TIMEOUT_S,
        defaults.ISOLATE_TIMEOUT_S,
        defaults.SHUTDOWN_TIMEOUT_S,
    )
    assert RECORD.log_dir == Path(defaults.LOG_DIR)


@pytest.mark.usefixtures("clean_env")
def test_help_shows_the_defaults_the_record_has() -> None:
    """Each `[default: X]` in --help, given back as --flag=X, yields the record's default."""
    ctx = command.make_context("safelaunch", ["train.py"])
    checked = []
    for param in command.params:
        record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
        shown = re.search(r"\[default: ([^\]]*)\]", record[1]) if record else None
        name = param.name or ""
        if shown is None or getattr(RECORD, name, None) is None:
            continue  # no default shown, or one the record leaves open (master_addr, ...)
        text = "" if shown[1] == '""' else shown[1]
        config = build_config(_raw(f"{param.opts[0]}={text}"), {}, frozenset())
        assert getattr(config, name) == getattr(RECORD, name), name
        checked.append(name)
    assert {"nnodes", "hang_timeout", "isolate_timeout", "shutdown_timeout", "log_dir"} <= set(
        checked
    )
    assert f"[default: {defaults.MASTER_ADDR}]" in command.get_help(ctx)
    status_help = status_command.get_help(status_command.make_context("status", []))
    assert f"[default: {RECORD.log_dir}]" in status_help
