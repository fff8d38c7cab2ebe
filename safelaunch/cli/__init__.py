"""The command line: torchrun 2.13's flags, safelaunch's own options, and the subcommands.

options.py declares the launch's flags, parser.py sets argparse up (and says why
argparse), commands.py holds the commands and `finish`, the one place where errors become
exit codes; main() picks the command.
"""

from __future__ import annotations

import signal
import sys

from safelaunch.cli.commands import (
    doctor_command,
    explain_command,
    launch_command,
    lint_command,
    status_command,
)
from safelaunch.early_stop import stop_before_ranks, unwrapped_signal
from safelaunch.interpreter import settled

__all__ = [
    "doctor_command",
    "explain_command",
    "launch_command",
    "lint_command",
    "main",
    "status_command",
]


class EarlyInterrupt(BaseException):
    """Ctrl-C before the launcher's own handlers are in place.

    Not a KeyboardInterrupt: code on the way (`finish`, the launch) handles that as a
    Ctrl-C of its own. A BaseException passes every `except Exception` (and runs every
    `finally`) on its way out to main(), which makes it exit 130 without a traceback.
    SIGTERM (a scheduler's stop, `kill`) takes the same way out, with 143: killed by it
    silently, the launcher said nothing while preflight ran (a multi-node rendezvous
    wait keeps the default: launch.run says why).
    """

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signum)
        self.signum = signum


def _early_interrupt(signum: int, frame: object) -> None:
    raise EarlyInterrupt(signum)


def main() -> None:
    """Console-script entry point: `safelaunch explain|doctor|status|lint ...`, else a launch."""
    _subcommands()
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when ignored (&)
        signal.signal(signal.SIGINT, _early_interrupt)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # an ignored one stays ignored
        signal.signal(signal.SIGTERM, _early_interrupt)
    try:
        launch_command(sys.argv[1:])
    except BaseException as exc:  # also wrapped by Python on the way (early_stop.py)
        stop = unwrapped_signal(exc)
        if isinstance(stop, EarlyInterrupt):
            stop_before_ranks(stop.signum)
        raise


SUBCOMMANDS = {
    "explain": explain_command,
    "doctor": doctor_command,
    "status": status_command,
    "lint": lint_command,
}


def _subcommands() -> None:
    # A subcommand word only where a script name would stand: ./explain still launches.
    # Each exits through commands.finish (or the parser's own usage error).
    subcommand = SUBCOMMANDS.get(sys.argv[1]) if len(sys.argv) > 1 else None
    if subcommand is not None:
        settled()  # no launch import follows: the collector runs again from here
        subcommand(sys.argv[2:])
