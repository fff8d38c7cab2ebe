"""Code that runs inside a rank; it imports nothing from the launcher side.

Import-linter enforces that, so that a rank never pays for (or breaks on) the
launcher's dependencies.
"""

from __future__ import annotations


def heartbeat(step: int | None = None) -> None:
    """Report explicit progress to safelaunch; a no-op where nothing listens (outside safelaunch).

    Hang detection (which uses `step`) is not built yet, so this is a no-op everywhere
    for now; calling it is already safe.
    """
    del step
