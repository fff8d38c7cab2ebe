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


def test_an_exit_handler_runs_and_a_thread_is_joined() -> None:
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


def test_handlers_and_daemon_threads_still_skip_the_module_teardown() -> None:
    """What a multi-node launcher has once torch is loaded: its atexit handlers and a
    daemon thread. The handlers run; the teardown (seconds with torch) does not."""
    done = run(
        "import atexit, threading, time\n"
        "class Late:\n    def __del__(self): print('torn down')\n"
        "late = Late()\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "atexit.register(lambda: print('handler ran'))\n"
        "_leave(SystemExit(5))"
    )
    assert (done.returncode, done.stdout) == (5, "handler ran\n")


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
        "import gc; from safelaunch.interpreter import paused, settled\n"
        "settled(); print(gc.isenabled(), gc.get_freeze_count())\n"  # never paused: untouched
        "gc.disable(); settled(); print(gc.isenabled(), gc.get_freeze_count() > 0)\n"
        "gc.disable()\n"
        "with paused(): print(gc.isenabled())\n"
        "print(gc.isenabled())"  # a pause inside a pause leaves the outer one on
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.split("\n")[:4] == ["True 0", "True True", "False", "False"]


def test_a_library_that_stays_loaded_imports_unpaused_in_process_and_frozen_when_bent() -> None:
    code = (
        "import gc; from safelaunch import interpreter\n"
        "with interpreter.paused(keep=True): print(gc.isenabled())\n"  # in-process: a plain import
        "print(gc.isenabled(), gc.get_freeze_count())\n"
        "interpreter.pause_collector(); interpreter.settled(); made = gc.get_freeze_count()\n"
        "with interpreter.paused(keep=True):\n"
        "    print(gc.isenabled()); kept = [[] for _ in range(99)]\n"
        "print(gc.isenabled(), gc.get_freeze_count() >= made + 99)\n"
        "gc.disable()\n"
        "with interpreter.paused(keep=True): pass\n"  # paused around it: left as it was
        "print(gc.isenabled())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.split("\n")[:5] == ["True", "True 0", "False", "True True", "False"]


# A real signal, sent while the CLI imports: a finder asked for safelaunch.cli sends it
# (the handler runs at the next bytecode, inside that import), then lets the import go on.
SIGNALLED_WHILE_IMPORTING = """
import os, signal, sys
class Signal:
    def find_spec(self, name, path=None, target=None):
        if name == "safelaunch.cli":
            os.kill(os.getpid(), signal.{signal})
        return None
sys.meta_path.insert(0, Signal())
sys.argv = ["safelaunch", "--nproc-per-node=1", "never_started.py"]
from safelaunch.entry import main
main()
"""


def test_sigterm_or_ctrl_c_while_the_cli_imports_is_one_line_and_the_signals_code() -> None:
    """SIGTERM there killed the launcher without a word (a scheduler's stop at start)."""
    for name, said, code in (
        ("SIGTERM", "stopped by SIGTERM", 143),
        ("SIGINT", "interrupted", 130),
    ):
        done = subprocess.run(
            [sys.executable, "-c", SIGNALLED_WHILE_IMPORTING.format(signal=name)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.returncode, done.stdout) == (code, ""), done.stderr
        assert done.stderr == f"safelaunch: {said} before any rank started\n"


def test_a_second_sigterm_while_it_ends_is_the_default_death_not_a_traceback() -> None:
    """The first SIGTERM inside the CLI's import, a second one while entry ends (it imports
    exitcodes then): the kernel's default, as a shell sees it: 143, no traceback."""
    code = SIGNALLED_WHILE_IMPORTING.format(signal="SIGTERM").replace(
        'if name == "safelaunch.cli":', 'if name in ("safelaunch.cli", "safelaunch.exitcodes"):'
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode in (-15, 143), done.stderr  # killed by it, or its code
    assert "Traceback" not in done.stderr, done.stderr


def test_an_ignored_sigterm_stays_ignored_while_the_cli_imports() -> None:
    """`nohup`-style: SIG_IGN inherited is kept (the launch then runs as before)."""
    code = (
        "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        + SIGNALLED_WHILE_IMPORTING.format(signal="SIGTERM")
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "stopped by SIGTERM" not in done.stderr
    assert done.returncode == 78, done.stderr  # the script does not exist: preflight says so


# A signal whose exception Python wraps: 3.11 turns whatever a descriptor's __set_name__
# raises into a RuntimeError (its cause the original), and a dataclass field's
# __set_name__ runs while the launch imports its modules. The signal is sent from the
# N-th such call in safelaunch's modules, N drawn, so each run lands in another class.
SIGNALLED_IN_SET_NAME = """
import dataclasses, os, signal, sys
calls = [0]
original = dataclasses.Field.__set_name__
def set_name(self, owner, name):
    if owner.__module__.startswith("safelaunch."):
        calls[0] += 1
        if calls[0] == {nth}:
            os.kill(os.getpid(), signal.{signal})
    return original(self, owner, name)
dataclasses.Field.__set_name__ = set_name
sys.argv = ["safelaunch", "--nproc-per-node=1", "never_started.py"]
from safelaunch.entry import main
main()
"""


def test_a_signal_wrapped_by_python_while_the_launch_imports_is_still_that_signal() -> None:
    """Measured: Ctrl-C inside HangEvidence's field ended as "internal error: a bug"."""
    import random

    rng = random.Random()
    for name, said, code in (
        ("SIGINT", "interrupted", 130),
        ("SIGTERM", "stopped by SIGTERM", 143),
    ):
        nth = rng.randrange(1, 6)
        script = SIGNALLED_IN_SET_NAME.format(signal=name, nth=nth)
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr, (
            nth,
            done.stderr,
        )
        assert done.returncode == code, (nth, done.stderr)
        assert done.stderr.startswith(f"safelaunch: {said}"), (nth, done.stderr)
