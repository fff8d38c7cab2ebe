"""A launch stopped before any rank started (Ctrl-C, SIGTERM): one line, the signal's code.

Said from two places, one window each: entry.py while the CLI imports, the CLI's own
handler while the launch reads its flags and runs preflight.
"""

from __future__ import annotations

import contextlib
import sys
from typing import NoReturn


def stop_before_ranks(signum: int) -> NoReturn:
    """Say why and exit 128 + signum (130 for Ctrl-C, 143 for SIGTERM)."""
    # imported here: entry.py calls this while `signal`'s enums may not be loaded yet
    import signal

    from safelaunch import exitcodes

    said = "interrupted" if signum == signal.SIGINT else "stopped by SIGTERM"
    with contextlib.suppress(OSError, ValueError, AttributeError):  # None: stderr closed
        sys.stderr.write(f"safelaunch: {said} before any rank started\n")
    sys.exit(exitcodes.for_signal(signum))
