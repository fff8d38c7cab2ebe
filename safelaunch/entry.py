"""The console-script entry: a Ctrl-C even while Python imports the CLI is exit 130.

Importing click and the launcher takes a few hundred milliseconds; a KeyboardInterrupt
in that window would otherwise print a traceback.
"""

import sys

from safelaunch import exitcodes  # imports only `signal`: no window worth guarding


def main() -> None:
    """Import the CLI, then run it (safelaunch.cli.main handles Ctrl-C from there on)."""
    try:
        from safelaunch.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("safelaunch: interrupted before any rank started\n")
        sys.exit(exitcodes.INTERRUPTED)
    cli_main()
