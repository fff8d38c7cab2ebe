"""Signals to the launcher: the handler only records them; the supervision loop acts."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from types import FrameType
from typing import Any


class SignalReceiver:
    """Installs recording handlers for the signals the launcher forwards."""

    def __init__(self, signals: Iterable[signal.Signals]) -> None:
        self._signals = tuple(signals)
        self._previous: dict[signal.Signals, Any] = {}
        self._pending: list[int] = []

    def install(self) -> None:
        """Start recording; the previous handlers are kept for restore()."""
        for sig in self._signals:
            self._previous[sig] = signal.signal(sig, self._record)

    def restore(self) -> None:
        """Put the previous handlers back."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def take(self) -> list[int]:
        """The signals received since the last take(), oldest first."""
        taken, self._pending = self._pending, []
        return taken

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self._pending.append(signum)
