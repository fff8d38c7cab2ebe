"""The one root-cause rule (diagnose/rootcause.py) on rank evidence, and the error text it reads.

Pure rules, no processes: ranks that leave early, Python's own exception types,
native aborts, "without an error message" only when a log has none.
"""

from __future__ import annotations

import signal
from pathlib import Path

import builders

from safelaunch.diagnose.errortext import from_log, last_lines
from safelaunch.diagnose.leaving import Leave, describe_leave
from safelaunch.diagnose.rootcause import find_root_cause

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
CLOSED = (FIXTURES / "peer-connection-closed.log").read_text()


_rank = builders.rank_evidence


def test_a_rank_that_exited_0_first_is_the_root_cause_of_its_peers_errors() -> None:
    ranks = [
        _rank(0, text=CLOSED, failed=True, ended=2.0, code=1),
        _rank(1, text="rank 1 done\n", ended=1.5, code=0),
    ]
    root = find_root_cause(ranks)
    assert root is not None and root.rank == 1 and root.left_early
    assert root.klass == "data/sampling" and root.signature is not None
    assert root.signature.id == "rank-left-early"
    assert any("drop_last" in step for step in root.signature.next_steps)
    assert any("Join" in step for step in root.signature.next_steps)
    assert root.consequences == ((0, "peer-connection-closed"),)


def test_a_rank_that_left_by_sys_exit_0_and_no_error_left_early() -> None:
    # (a non-zero code is the rank's own failure: tests/test_rootcause_leaving.py)
    leave = Leave(rank=1, how="sys.exit", code=0, location="/u/train.py:9 in <module>", seq=40)
    ranks = [
        _rank(0, text=CLOSED, failed=True, ended=2.0, code=1),
        _rank(1, text="stopping\n", ended=1.0, code=0, leave=leave),
    ]
    root = find_root_cause(ranks)
    assert root is not None and root.rank == 1 and root.left_early
    assert root.error is not None and root.error.location == "/u/train.py:9 in <module>"
    assert root.error.line.startswith("SystemExit: sys.exit(0) while the other ranks")
    assert describe_leave(leave, {0: 41, 1: 40}, 1) == [
        "count: rank 1 had issued 40 collective(s); the others had reached 41"
    ]


def test_a_real_error_is_never_taken_for_leaving_early() -> None:
    error = "Traceback (most recent call last):\n  File \"/u/t.py\", line 3, in f\nKeyError: 'x'\n"
    ranks = [
        _rank(0, text=error, failed=True, ended=1.0, code=1),
        _rank(1, text=CLOSED, failed=True, ended=1.2, code=1),
        _rank(2, text="", ended=0.5, code=0),  # finished before anyone failed: no cause
    ]
    root = find_root_cause(ranks)
    assert root is not None and root.rank == 0 and not root.left_early


def test_a_clean_exit_after_the_failure_is_not_a_cause() -> None:
    ranks = [
        _rank(0, text=CLOSED, failed=True, ended=1.0, code=1),
        _rank(1, text="", ended=3.0, code=0),
    ]
    root = find_root_cause(ranks)
    assert root is not None and root.rank == 0 and not root.left_early


def _traceback(line: str) -> str:
    return f'Traceback (most recent call last):\n  File "/u/t.py", line 3, in <module>\n{line}\n'


def test_python_exception_types_carry_a_class_when_no_signature_matches() -> None:
    cases = {
        "ModuleNotFoundError: No module named 'apex'": "environment/launch",
        "ImportError: cannot import name 'x' from 'y'": "environment/launch",
        "FileNotFoundError: [Errno 2] No such file or directory: 'data/a.bin'": (
            "environment/launch"
        ),
        "MemoryError": "resources",
        "torch.distributed.DistStoreError: wait timeout after 8000ms, keys: /default_pg/0": (
            "environment/launch"
        ),
        "OSError: [Errno 28] No space left on device": "resources",
        "StopIteration": "data/sampling",
        "ZeroDivisionError: division by zero": "model/gradient",
        "KeyError: 'lr'": "unknown",
    }
    for line, klass in cases.items():
        root = find_root_cause([_rank(0, text=_traceback(line), failed=True, code=1)])
        assert root is not None and root.klass == klass, line
        assert root.error is not None and root.error.location == "/u/t.py:3 in <module>"


def test_a_module_name_in_some_other_line_is_not_an_import_error() -> None:
    text = "warning: ImportError: optional x missing\n" + _traceback("KeyError: 'lr'")
    root = find_root_cause([_rank(0, text=text, failed=True, code=1)])
    assert root is not None and root.klass == "unknown"


def test_native_abort_reads_what_and_the_users_frame_from_faulthandler() -> None:
    error = from_log(None, (FIXTURES / "native-abort.log").read_text())
    assert error is not None
    assert error.line == "std::runtime_error: fused_op: bad alignment"
    assert error.location == "/home/user/train.py:8 in step"


def test_fatal_signal_is_placed_by_the_faulthandler_stack() -> None:
    text = (
        "Fatal Python error: Segmentation fault\n\nCurrent thread 0x01 (most recent call first):\n"
        '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at\n'
        '  File "/u/decode.py", line 11 in decode\n'
        '  File "/u/decode.py", line 15 in <module>\n\nExtension modules: numpy (total: 1)\n'
    )
    root = find_root_cause([_rank(1, text=text, failed=True, signum=signal.SIGSEGV)])
    assert root is not None and root.error is not None
    assert root.error.line == "Fatal Python error: Segmentation fault"
    assert root.error.location == "/u/decode.py:11 in decode"
    assert root.signature is not None and root.signature.id == "native-crash"


def test_no_error_message_shows_the_last_lines() -> None:
    text = "[rank1]: epoch 3\n\n[rank1]: saving to /ckpt failed, giving up\n"
    root = find_root_cause([_rank(1, text=text, failed=True, code=2)])
    assert root is not None and root.error is None
    assert last_lines(text) == ["epoch 3", "saving to /ckpt failed, giving up"]


def test_ddp_parameters_of_other_shapes_are_a_model_mismatch() -> None:
    # measured with torch 2.13 (bench/faults/scenarios/model_ddp_different_models.py)
    line = (
        "RuntimeError: [1]: params[0] in this process with sizes [32, 8] appears not to match "
        "sizes of the same param in process 0."
    )
    root = find_root_cause([_rank(1, text=_traceback(line), failed=True, code=1)])
    assert root is not None and root.signature is not None
    assert root.signature.id == "ddp-model-mismatch" and root.klass == "model/gradient"


def test_an_error_in_a_dataloader_worker_is_placed_by_the_workers_traceback() -> None:
    text = (FIXTURES / "dataloader-worker-error.log").read_text()
    root = find_root_cause([_rank(1, text=text, failed=True, code=1)])
    assert root is not None and root.signature is not None
    assert root.signature.id == "dataloader-worker-error" and root.klass == "data/sampling"
    assert root.error is not None
    assert root.error.line == "ValueError: record 5: label -1 out of range"
    assert root.error.location == "<string>:8 in __getitem__"


def test_a_dataloader_worker_killed_is_resources_one_that_died_data_sampling() -> None:
    """SIGKILL ("Killed") is what the OOM killer sends, as to a rank (resources); a worker
    that died otherwise is the data path's (its own error is in its traceback)."""
    line = "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. "
    root = find_root_cause([_rank(1, text=_traceback(line), failed=True, code=1)])
    assert root is not None and root.signature is not None
    assert (root.signature.id, root.klass) == ("dataloader-worker-killed", "resources")
    line = "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly"
    root = find_root_cause([_rank(1, text=_traceback(line), failed=True, code=1)])
    assert root is not None and root.signature is not None
    assert (root.signature.id, root.klass) == ("dataloader-worker-died", "data/sampling")
