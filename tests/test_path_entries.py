"""A directory or a zip file (zipapp) with a `__main__.py` runs as python runs it:
torchrun's ranks are plain python processes, so `safelaunch appdir` must work where
`torchrun appdir` does (rank/pathentry.py)."""

from __future__ import annotations

import json
import zipapp
import zipfile
from pathlib import Path

import pytest
from conftest import cli, launch

from safelaunch import exitcodes
from safelaunch.rank.pathentry import is_path_entry

DUMP = """\
import json, os, sys
path = os.path.join(os.environ["PIDS_DIR"], "entry" + os.environ["RANK"] + ".json")
with open(path, "w") as out:
    json.dump({"name": __name__, "argv": sys.argv, "path0": sys.path[0]}, out)
"""


def _app(tmp_path: Path, source: str = DUMP) -> Path:
    app = tmp_path / "appdir"
    app.mkdir()
    (app / "__main__.py").write_text(source)
    return app


@pytest.mark.parametrize("kind", ["directory", "zipapp"])
def test_a_directory_or_zipapp_runs_its_main_on_every_rank(tmp_path: Path, kind: str) -> None:
    app = _app(tmp_path)
    target = app
    if kind == "zipapp":
        target = tmp_path / "app.pyz"
        zipapp.create_archive(app, target, interpreter="/usr/bin/env python3")
    run = launch(tmp_path, "--nproc-per-node=2", target.name, "a", "--b")
    assert run.returncode == 0, run.stderr
    for rank in (0, 1):
        seen = json.loads((tmp_path / "pids" / f"entry{rank}.json").read_text())
        # what `python appdir a --b` gives: argv[0] as typed, the entry as sys.path[0]
        assert seen == {"name": "__main__", "argv": [target.name, "a", "--b"], "path0": str(target)}


def test_a_failure_inside_a_directory_entry_is_diagnosed_at_its_line(tmp_path: Path) -> None:
    _app(tmp_path, "import os\nif os.environ['RANK'] == '1':\n    raise RuntimeError('no shard')\n")
    run = launch(tmp_path, "--nproc-per-node=2", "appdir")
    assert run.returncode == 1
    assert "error: RuntimeError: no shard" in run.stderr
    assert "appdir/__main__.py:3 in <module>" in run.stderr


def test_a_directory_without_main_is_one_line_and_nothing_starts(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    result = cli(tmp_path, "--nproc-per-node=2", "data")
    assert result.returncode == exitcodes.PREFLIGHT
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "'data' is a directory without a __main__.py" in lines[0]
    assert not (tmp_path / "logs").exists()


def test_a_syntax_error_in_a_directory_entry_stops_the_launch(tmp_path: Path) -> None:
    _app(tmp_path, "def f(:\n")
    result = cli(tmp_path, "--nproc-per-node=2", "appdir")
    assert result.returncode == exitcodes.SYNTAX
    assert "appdir/__main__.py:1: SyntaxError" in result.stderr
    assert not (tmp_path / "logs").exists()


def test_only_real_zip_files_with_a_main_are_path_entries(tmp_path: Path) -> None:
    app = _app(tmp_path)
    zipped = tmp_path / "app.pyz"
    zipapp.create_archive(app, zipped)
    assert is_path_entry(str(app)) and is_path_entry(str(zipped))
    # a script that merely holds the zip signature, a zip without __main__.py, a plain dir
    fake = tmp_path / "fake.py"
    fake.write_bytes(b"MAGIC = b'PK\\x05\\x06'\nprint(MAGIC)\n" + b"PK\x05\x06")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "x.py").write_text("")
    nomain = tmp_path / "nomain.pyz"
    zipapp.create_archive(bare, nomain, main="x:f")  # has a generated __main__.py
    lib = tmp_path / "lib.zip"
    with zipfile.ZipFile(lib, "w") as archive:
        archive.writestr("x.py", "")
    assert not is_path_entry(str(fake))
    assert not is_path_entry(str(bare))
    assert is_path_entry(str(nomain))
    assert not is_path_entry(str(lib))
    assert not is_path_entry(str(tmp_path / "missing.py"))
