"""The console-script entry: a Ctrl-C even while Python imports the CLI is exit 130, and a
SIGTERM there exit 143, each with one line.

Importing the CLI and the launcher takes tens of milliseconds; a KeyboardInterrupt in
that window would otherwise print a traceback, and a SIGTERM end the launcher silently.

Two launch costs are cut here (safelaunch/interpreter.py, the one place the launcher
bends the interpreter): no garbage collection while the launcher imports, and no
interpreter finalization once the exit code is decided.
"""

import os

from safelaunch import interpreter

# `signal` builds enums (~3 ms, unguarded before the try below): its C core has what this
# module needs (safelaunch/rank/stdlib_standins.py)
from safelaunch.rank.stdlib_standins import signals

MESSAGES_WAIT = 2.0  # seconds launcher messages may wait at exit for a blocked terminal


class _Stopped(BaseException):
    """SIGTERM while the CLI imports (~0.1 s): the default action ended the launcher
    without a word (a scheduler's stop at start); now it ends as Ctrl-C does there."""


def _stopped(signum: int, frame: object) -> None:
    raise _Stopped


def main() -> None:
    """Import the CLI, then run it (safelaunch.cli.main handles Ctrl-C and SIGTERM from
    there on)."""
    interpreter.pause_collector()
    _fill_closed_streams()
    guarded = signals.getsignal(signals.SIGTERM) == signals.SIG_DFL  # an ignored one stays so
    if guarded:
        signals.signal(signals.SIGTERM, _stopped)
    try:
        from safelaunch.cli import main as cli_main

        if guarded:  # the CLI installs its own, where it finds the default
            signals.signal(signals.SIGTERM, signals.SIG_DFL)
    except BaseException as caught:
        from safelaunch.early_stop import stop_before_ranks, unwrapped_signal

        stop = unwrapped_signal(caught)  # itself, or wrapped by Python on the way
        if not isinstance(stop, (KeyboardInterrupt, _Stopped)):
            raise
        # a second Ctrl-C or SIGTERM while this ends: the default action, not a traceback
        signals.signal(signals.SIGINT, signals.SIG_DFL)
        if guarded:
            signals.signal(signals.SIGTERM, signals.SIG_DFL)
        stop_before_ranks(
            signals.SIGINT if isinstance(stop, KeyboardInterrupt) else signals.SIGTERM
        )
    try:
        cli_main()
    except SystemExit as done:
        _leave(done)


def _fill_closed_streams() -> None:
    """Started with fd 0, 1 or 2 closed: put /dev/null there.

    Otherwise the first file the launcher opens (launcher.log) would take that number,
    and whatever writes to "stdout" (a probe, the keeper) would write into it.
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one


def _leave(done: SystemExit) -> None:
    """Exit with the decided code, skipping the interpreter's finalization where safe."""
    import threading  # imported here: the Ctrl-C window before the CLI's guard stays short

    from safelaunch.console import drain_messages  # loaded by the CLI already

    drain_messages(MESSAGES_WAIT)  # a slow terminal's queued messages, bounded
    interpreter.leave(done, sum(not thread.daemon for thread in threading.enumerate()))
