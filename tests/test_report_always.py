"""A report and the root cause's exit code on every path, also when what the ranks left
behind is hostile or diagnosing it hits a bug of ours."""

from __future__ import annotations

import sys
from pathlib import Path

import builders
from conftest import _communicate, _popen, launch, marked_env

# Rank 1 writes torch's error file as a million nested brackets, then exits 3.
DEEP_ERROR_FILE = """\
import os, sys, time
if os.environ["RANK"] == "1":
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "wb") as out:
        out.write(b"[" * 1_000_000 + b"]" * 1_000_000)
    sys.exit(3)
time.sleep(30)
"""

# The launcher with diagnose() made to raise, as a bug of ours would.
BROKEN_DIAGNOSIS = """\
import safelaunch.diagnose as diagnose
from safelaunch.entry import main

def broken(*args, **kwargs):
    raise KeyError("planted")

diagnose.diagnose = broken
main()
"""

FAIL = "import os, sys, time\nif os.environ['RANK'] == '1':\n    sys.exit(5)\ntime.sleep(30)\n"


def _report(log_dir: Path) -> dict[str, object]:
    (run,) = [p for p in log_dir.iterdir() if not p.is_symlink()]
    return builders.read_report(run / "attempt_0")


def test_a_hostile_error_file_leaves_the_diagnosis_to_the_log(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(DEEP_ERROR_FILE)
    run = launch(tmp_path, "--nproc-per-node=2", "train.py")
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr
    assert "FAILED: rank 1 exited with code 3" in run.stderr
    assert _report(run.log_dir)["status"] == "failed"


def test_a_bug_while_diagnosing_still_gives_the_code_and_a_report(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(FAIL)
    env, mark = marked_env(tmp_path)
    logs = tmp_path / "logs"
    argv = [sys.executable, "-c", BROKEN_DIAGNOSIS, "--log-dir", str(logs)]
    proc = _popen([*argv, "--nproc-per-node=2", "train.py"], tmp_path, env, text=True)
    _, stderr = _communicate(proc, mark, 60)
    assert proc.returncode == 5, stderr  # rank 1's own code
    assert "internal error while diagnosing: KeyError: 'planted'" in stderr
    assert "FAILED: rank 1 exited with code 5" in stderr
    assert "Traceback" not in stderr
    report = _report(logs)
    assert report["status"] == "failed"
