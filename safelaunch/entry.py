"""The console-script entry: a Ctrl-C even while Python imports the CLI is exit 130.

Importing click and the launcher takes a few hundred milliseconds; a KeyboardInterrupt
in that window would otherwise print a traceback.

Two launch costs are cut here, in the one process that `safelaunch` and `python -m
safelaunch` run (tests that call the click commands in-process never come through):

- No garbage collection while the launcher imports (safelaunch.cli.commands.settled
  turns it back on once a command's imports are done, and says what it saves).
- The interpreter's own exit: once the code is decided and the launcher has cleaned up
  after itself, finalizing the interpreter (module teardown, a full collection) took
  17-18 ms of every launch. `_leave` skips it when nothing is left for it to do.
"""

import atexit
import gc
import os
import sys

from safelaunch import exitcodes  # imports only `signal`: no window worth guarding


def main() -> None:
    """Import the CLI, then run it (safelaunch.cli.main handles Ctrl-C from there on)."""
    gc.disable()  # until safelaunch.cli.commands.settled(): a launch or a subcommand calls it
    try:
        from safelaunch.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("safelaunch: interrupted before any rank started\n")
        sys.exit(exitcodes.INTERRUPTED)
    try:
        cli_main()
    except SystemExit as done:
        _leave(done)


def _leave(done: SystemExit) -> None:
    """Exit with the decided code without finalizing the interpreter, when that is safe.

    By now the launch's `finally` has stopped the keeper, released the port lock and
    removed the private directory, and every file the launcher writes was written with
    os.write or closed by a `with`. What finalization would still do: run atexit handlers,
    join threads, flush sys.stdout/sys.stderr. So: only with no handler registered and
    no thread but this one; after flushing both streams ourselves; and never for a code
    that is not a number (sys.exit("text") prints it) nor when a flush fails (then the
    interpreter's own exit reports it as before).
    """
    import threading  # loaded long before (click): not in the window before the guard

    code = 0 if done.code is None else done.code
    if not isinstance(code, int) or atexit._ncallbacks() or threading.active_count() > 1:
        raise done
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        raise done from None
    os._exit(code & 0xFF)  # what the kernel keeps of sys.exit's code too
