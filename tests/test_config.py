"""Table tests for torchrun's value formats."""

from __future__ import annotations

import signal

import pytest

from safelaunch.config import (
    STD_ALL,
    STD_ERR,
    STD_NONE,
    STD_OUT,
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
