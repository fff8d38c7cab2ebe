"""safelaunch: a drop-in replacement for torchrun that makes distributed failures diagnosable."""

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
