"""The entry script is compiled before any rank starts: a syntax error is one line with
file:line, exit 1 (python's own code, what every rank would have exited with), nothing
spawned, no log directory, no rerun."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("x = 1\nfor i in range(3)\n    pass\n", "train.py:2: SyntaxError: expected ':'"),
        ("for i in range(3):\n    x = i\n      y = x\n", "train.py:3: IndentationError"),
    ],
)
def test_syntax_errors_stop_the_launch(tmp_path: Path, source: str, error: str) -> None:
    (tmp_path / "train.py").write_text(source)
    result = cli(tmp_path, "--nproc-per-node=2", "train.py")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and error in lines[0] and "nothing was started" in lines[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "logs").exists()  # no run, no rank, no rerun


def test_a_module_found_under_the_working_directory_is_compiled(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text("if True\n    pass\n")
    result = cli(tmp_path, "--nproc-per-node=1", "-m", "pkg.train")
    assert result.returncode == 1
    assert "pkg/train.py:1: SyntaxError" in result.stderr


def test_a_module_not_found_without_importing_is_left_to_the_rank(tmp_path: Path) -> None:
    result = cli(tmp_path, "--nproc-per-node=1", "--hang-timeout=0", "-m", "json.tool", "-h")
    assert result.returncode == 0, result.stderr
