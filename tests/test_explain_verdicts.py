"""`safelaunch explain` on what users paste: torchrun's plain console (no --tee), a
multi-node log with `[node1/rank3]:` prefixes, one rank's own log file.

The torchrun consoles in fixtures/torchrun are real torchrun 2.13 runs of fault-zoo
scenarios (paths replaced by /home/user and /opt/venv). Run directories are covered by
the zoo's parity test (tests/test_fault_zoo.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import safelaunch_cmd

CONSOLES = Path(__file__).parent / "fixtures" / "torchrun"


def _explain(where: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        safelaunch_cmd("explain", where), input=stdin, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_torchrun_console_with_torchs_rank_prefix() -> None:
    text = _explain(str(CONSOLES / "data_stop_iteration.console"))
    assert "root cause: rank 1" in text
    assert "class: data/sampling (python-stop-iteration)" in text
    assert "at:    /home/user/data_stop_iteration.py:12 in <module>" in text
    assert "rank 0: failed as a consequence (peer-connection-closed), not a cause" in text


def test_torchrun_console_without_prefixes_goes_to_its_root_cause_rank() -> None:
    # both ranks died before init_process_group: nothing is prefixed; torchrun's own
    # ChildFailedError traceback is not taken for the rank's
    text = _explain(str(CONSOLES / "env_import_missing.console"))
    assert "root cause: rank 0" in text
    assert "class: environment/launch (python-import-error)" in text
    assert "error: ModuleNotFoundError: No module named 'fused_adam_kernels'" in text
    assert "at:    /home/user/env_import_missing.py:3 in <module>" in text
    assert "ChildFailedError" not in text


def test_torchrun_exitcode_of_a_rank_that_printed_nothing() -> None:
    text = _explain(str(CONSOLES / "res_oom_killed.console"))
    assert "root cause: rank 1" in text
    assert "class: resources (killed-sigkill)" in text
    assert "rank 0: failed as a consequence (peer-connection-closed), not a cause" in text


def test_multi_node_prefixes() -> None:
    log = "\n".join(
        [
            "[node0/rank0]: step 1",
            "[node1/rank3]: Traceback (most recent call last):",
            '[node1/rank3]:   File "/home/u/train.py", line 40, in <module>',
            "[node1/rank3]: ModuleNotFoundError: No module named 'apex'",
            "[node0/rank1]: RuntimeError: [pair.cc:553] Connection closed by peer [10.0.0.2]:1.",
        ]
    )
    text = _explain("-", stdin=log)
    assert "root cause: rank 3" in text
    assert "class: environment/launch (python-import-error)" in text
    assert "at:    /home/u/train.py:40 in <module>" in text


def test_one_ranks_log_file(tmp_path: Path) -> None:
    log = tmp_path / "rank5.log"
    log.write_text(
        "epoch 1\nTraceback (most recent call last):\n"
        '  File "/home/u/train.py", line 7, in <module>\n'
        "OSError: [Errno 28] No space left on device\n"
    )
    text = _explain(str(log))
    assert "one rank's log (rank5.log), 1 rank log(s)" in text
    assert "root cause: rank 5" in text and "class: resources (disk-full)" in text


def test_a_log_without_an_error_shows_its_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "rank2.log"
    log.write_text("epoch 1\nsaving checkpoint\n")
    text = _explain(str(log))
    assert "no failure found in these logs" in text


def test_a_hang_verdict_names_one_rank_as_rank() -> None:
    from safelaunch.explain import _hang_lines

    group = {"ranks": [0], "activity": "barrier", "location": "t.py:3 in main"}
    lines = _hang_lines({"hang": {"stuck_for_s": 6, "culprits": [0], "groups": [group]}})
    assert "  rank 0: in barrier (t.py:3 in main)" in lines and "root cause: rank 0 (hang)" in lines
    two = _hang_lines({"hang": {"culprits": [1, 2], "groups": [{**group, "ranks": [1, 2]}]}})
    assert (
        "  ranks 1,2: in barrier (t.py:3 in main)" in two and "root cause: ranks 1,2 (hang)" in two
    )
