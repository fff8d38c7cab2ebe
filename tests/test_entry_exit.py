"""The console entry's two launch-cost cuts keep behaviour: the fast exit skips only what
finalization had nothing left to do for, and the collector comes back after the imports.

Each runs in a fresh interpreter: the fast exit ends the process that calls it.
"""

from __future__ import annotations

import subprocess
import sys

LEAVE = "import sys; from safelaunch.entry import _leave\n"


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LEAVE + code], capture_output=True, text=True, timeout=60
    )


def test_the_fast_exit_flushes_both_streams_and_keeps_the_code() -> None:
    # Pipes, so both streams are buffered: nothing reaches them without the flush.
    done = run("print('out', end=''); sys.stderr.write('err'); _leave(SystemExit(5))")
    assert (done.returncode, done.stdout, done.stderr) == (5, "out", "err")
    assert run("_leave(SystemExit(None))").returncode == 0
    assert run("_leave(SystemExit(True))").returncode == 1


def test_an_exit_handler_or_a_thread_still_gets_the_interpreters_exit() -> None:
    handler = run(
        "import atexit; atexit.register(lambda: print('handler ran')); _leave(SystemExit(3))"
    )
    assert (handler.returncode, handler.stdout) == (3, "handler ran\n")
    thread = run(
        "import threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('joined'))).start()\n"
        "_leave(SystemExit(4))"
    )
    assert (thread.returncode, thread.stdout) == (4, "joined\n")


def test_a_text_code_is_printed_as_sys_exit_prints_it() -> None:
    done = run("_leave(SystemExit('went wrong'))")
    assert (done.returncode, done.stderr) == (1, "went wrong\n")


def test_a_stream_that_cannot_be_flushed_is_left_to_the_interpreter() -> None:
    # A closed stdout: the interpreter's own exit says so and exits 120, as before.
    done = run("print('x'); sys.stdout.close(); _leave(SystemExit(0))")
    plain = subprocess.run(
        [sys.executable, "-c", "import sys; print('x'); sys.stdout.close(); sys.exit(0)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == plain.returncode


def test_the_collector_paused_for_the_imports_runs_again_after_them() -> None:
    code = (
        "import gc; from safelaunch.cli.commands import settled\n"
        "settled(); print(gc.isenabled(), gc.get_freeze_count())\n"  # never paused: untouched
        "gc.disable(); settled(); print(gc.isenabled(), gc.get_freeze_count() > 0)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.split("\n")[:2] == ["True 0", "True True"]
