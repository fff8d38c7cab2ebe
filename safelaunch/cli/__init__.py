"""The command line: torchrun 2.13's flags, safelaunch's own options, and the subcommands.

options.py declares the launch's flags, commands.py the commands and `finish`, the one
place where errors become exit codes; main() picks the command.
"""

from __future__ import annotations

import contextlib
import signal
import sys

from safelaunch import exitcodes
from safelaunch.cli.commands import (
    command,
    doctor_command,
    explain_command,
    lint_command,
    settled,
    status_command,
)

__all__ = ["command", "doctor_command", "explain_command", "lint_command", "main", "status_command"]


class EarlyInterrupt(BaseException):
    """Ctrl-C before the launcher's own handlers are in place.

    Not a KeyboardInterrupt: click turns that into "Aborted!" and exit 1 while it parses.
    A BaseException passes every `except Exception` (and runs every `finally`) on its way
    out to main(), which makes it exit 130 without a traceback.
    """


def _early_interrupt(signum: int, frame: object) -> None:
    raise EarlyInterrupt


def main() -> None:
    """Console-script entry point: `safelaunch explain|doctor|status|lint ...`, else a launch."""
    _subcommands()
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when ignored (&)
        signal.signal(signal.SIGINT, _early_interrupt)
    try:
        command(prog_name="safelaunch")
    except EarlyInterrupt:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write("safelaunch: interrupted before any rank started\n")
        sys.exit(exitcodes.INTERRUPTED)


def _subcommands() -> None:
    # A subcommand word only where a script name would stand: ./explain still launches.
    # Each exits through commands.finish (or click's own usage error).
    if sys.argv[1:2] in (["explain"], ["doctor"], ["status"], ["lint"]):
        settled()  # no launch import follows: the collector runs again from here
    if sys.argv[1:2] == ["explain"]:
        explain_command(args=sys.argv[2:], prog_name="safelaunch explain")
    if sys.argv[1:2] == ["doctor"]:
        doctor_command(args=sys.argv[2:], prog_name="safelaunch doctor")
    if sys.argv[1:2] == ["status"]:
        status_command(args=sys.argv[2:], prog_name="safelaunch status")
    if sys.argv[1:2] == ["lint"]:
        lint_command(args=sys.argv[2:], prog_name="safelaunch lint")
