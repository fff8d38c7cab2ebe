"""A launch stopped before any rank started (Ctrl-C, SIGTERM): one line, the signal's code.

Said from two places, one window each: entry.py while the CLI imports, the CLI's own
handler while the launch reads its flags and runs preflight.
"""

from __future__ import annotations

import contextlib
import sys
from typing import NoReturn


def unwrapped_signal(exc: BaseException) -> BaseException | None:
    """The signal's exception behind `exc` (a BaseException that is no Exception:
    KeyboardInterrupt, the CLI's EarlyInterrupt), itself or wrapped by Python; else None.

    Python 3.11 turns whatever a descriptor's `__set_name__` raises into a RuntimeError
    whose cause is the original, and a dataclass field's runs while the launch imports:
    a Ctrl-C there (measured: in config/launch_config.py's StreamSelection) ended as
    "internal error: this is a bug in safelaunch".
    """
    seen: set[int] = set()
    inner: BaseException | None = exc
    while inner is not None and id(inner) not in seen:
        if not isinstance(inner, Exception):
            return inner
        seen.add(id(inner))
        inner = inner.__cause__ or inner.__context__
    return None


def stop_before_ranks(signum: int) -> NoReturn:
    """Say why and exit 128 + signum (130 for Ctrl-C, 143 for SIGTERM)."""
    # imported here: entry.py calls this while `signal`'s enums may not be loaded yet
    import signal

    from safelaunch import exitcodes

    said = "interrupted" if signum == signal.SIGINT else "stopped by SIGTERM"
    with contextlib.suppress(OSError, ValueError, AttributeError):  # None: stderr closed
        sys.stderr.write(f"safelaunch: {said} before any rank started\n")
    sys.exit(exitcodes.for_signal(signum))
