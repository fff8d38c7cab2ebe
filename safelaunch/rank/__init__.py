"""Code that runs inside a rank; it imports nothing from the launcher side.

Import-linter enforces that, so that a rank never pays for (or breaks on) the
launcher's dependencies.
"""

from __future__ import annotations


def heartbeat(step: int | None = None) -> None:
    """Tell safelaunch the rank made progress (e.g. finished `step`); a no-op outside safelaunch.

    Only needed in loops that repeat one long native call with no collective and no
    Python line change between samples, which would otherwise look stuck.
    """
    from safelaunch.rank import beat  # here: the launcher imports this package for names only

    beat.report_step(step)
