"""safelaunch: a drop-in replacement for torchrun that makes distributed failures diagnosable."""

from __future__ import annotations

# Every rank imports this package first (its bootstrap lives in safelaunch.rank): `typing`
# would cost each one ~2 ms at start, so it is imported for the type checker only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "heartbeat"]


def __getattr__(name: str) -> Any:
    # Lazy: `python -m safelaunch` imports this package before safelaunch.entry can catch a
    # Ctrl-C; the less it imports, the shorter the window for a KeyboardInterrupt traceback.
    if name == "heartbeat":
        from safelaunch.rank import heartbeat

        return heartbeat
    raise AttributeError(name)
