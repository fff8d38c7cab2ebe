"""The suite cannot leak: a test stopped by pytest-timeout leaves no launcher or rank behind."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import leaks
from conftest import marked_env

# Each rank starts a child that clears its environment (so no mark), then sleeps.
RANK = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={})
name = f"{os.environ['SAFELAUNCH_TEST_MARK']}-{os.environ['RANK']}"
with open(os.path.join(PIDS, name), "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
time.sleep(60)
"""

# One launcher in the background (start), its ranks running before the test begins, and
# one in the foreground (launch), hung: pytest-timeout stops the test inside launch().
INNER = """
import os, time
import pytest
from conftest import launch, start

PIDS = {pids!r}

@pytest.fixture
def rank(tmp_path):
    rank = tmp_path / "rank.py"
    rank.write_text(f"PIDS = {{PIDS!r}}\\n" + {rank!r})
    (tmp_path / "bg").mkdir()
    start(tmp_path / "bg", "--nproc-per-node=2", str(rank))
    while len(os.listdir(PIDS)) < 2:
        time.sleep(0.05)
    return rank

def test_hangs(tmp_path, rank):
    launch(tmp_path, "--nproc-per-node=2", str(rank))
"""


def test_a_timed_out_test_leaves_no_process(tmp_path: Path) -> None:
    pids = tmp_path / "pids_seen"
    pids.mkdir()
    (tmp_path / "test_inner.py").write_text(INNER.format(pids=str(pids), rank=RANK))
    session = uuid.uuid4().hex[:12]
    env, _ = marked_env(tmp_path, {"SAFELAUNCH_TEST_SESSION": session})
    tests = Path(__file__).parent
    env["PYTHONPATH"] = str(tests)
    inner = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider"),
            *("-p", "no:hypothesispytest"),  # seconds of import, unused here
            *("-c", str(tests.parent / "pyproject.toml"), "--rootdir", str(tmp_path)),
            *("--timeout=3", "-o", "timeout_func_only=true", "-q", str(tmp_path / "test_inner.py")),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert inner.returncode == 1, inner.stdout + inner.stderr
    assert "Timeout (>3.0s)" in inner.stdout, inner.stdout
    started = [int(pid) for f in pids.iterdir() for pid in f.read_text().split()]
    # 2 ranks x (rank + unmarked child) in the background, and in the foreground as many as
    # the loaded machine started within the 3 s.
    assert len(started) >= 4, started
    # The inner pytest returned after its sweep: nothing may be left, not even for a moment.
    marked = [pid for pid, (_, _, mark) in leaks.scan(leaks.prefixed(session)).items() if mark]
    assert not marked, marked
    alive = [pid for pid in started if _alive(pid)]
    assert not alive, alive


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] != b"Z"
