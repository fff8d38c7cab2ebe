"""safelaunch: a drop-in replacement for torchrun that makes distributed failures diagnosable."""

from safelaunch.rank import heartbeat

__version__ = "0.1.0"
__all__ = ["__version__", "heartbeat"]
