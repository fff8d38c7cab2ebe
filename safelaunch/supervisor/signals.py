"""Signals to the launcher: the handler only records them; the supervision loop acts.

Two kinds. Stopping signals (--signals-to-handle, torchrun's SIGTERM,SIGINT,SIGHUP,SIGQUIT)
end the job: forwarded to every rank, then SIGKILL after --shutdown-timeout; the same
signal again kills now. SIGUSR1 and SIGUSR2 ("checkpoint now", e.g. SLURM's
`--signal=USR1@N`) never stop the job: they are passed to the ranks, which decide.
torchrun dies of them (ranks orphaned) unless listed, and then stops the job; the
launcher dying without a report is never right here, so they are always caught.

A repeated SIGTERM within REPEAT_WINDOW is one request: at a hard time limit SLURM
delivers SIGTERM twice, milliseconds apart (the step daemon, then srun; measured on
SLURM 22.05), and the second must not SIGKILL ranks that are writing a checkpoint.
A second Ctrl-C (SIGINT) is a person insisting: it always escalates.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

PASSED_ON = (signal.SIGUSR1, signal.SIGUSR2)  # forwarded to the ranks, the job goes on
REPEAT_WINDOW = 2.0  # seconds: the same SIGTERM again within this is the same request
_MERGED = (signal.SIGTERM,)  # a person's repeated Ctrl-C / Ctrl-\ must still escalate
_stop_requested = False  # set by any receiver's handler: slow work outside the loop stops


def stop_requested() -> bool:
    """True once a stopping signal reached the launcher: work that is not the supervision
    loop (a diagnosis's torch subprocess) gives up, so the signal is honoured within a
    second in every phase."""
    return _stop_requested


class SignalReceiver:
    """Installs recording handlers for the signals the launcher acts on.

    `pass_on=False`: SIGUSR1/SIGUSR2 are caught (the launcher survives them) but not sent
    to the ranks again, because whoever sent them already reached every rank (an srun
    step: SLURM signals every process of the step).
    """

    def __init__(self, signals: Iterable[signal.Signals], *, pass_on: bool = True) -> None:
        wanted = tuple(signals)
        self._stopping = tuple(s for s in wanted if s not in PASSED_ON)
        self._signals = self._stopping + PASSED_ON
        self.pass_on = pass_on
        self._previous: dict[signal.Signals, Any] = {}
        self._pending: list[int] = []
        self._passed: list[int] = []
        self._merged: list[tuple[int, float]] = []  # (signal, seconds after the first)
        self._first_at: dict[int, float] = {}
        self.wake: Callable[[], None] = _nothing  # the supervision loop's: act now

    def install(self) -> None:
        """Start recording; the previous handlers are kept for restore()."""
        for sig in self._signals:
            self._previous[sig] = signal.signal(sig, self._record)

    def restore(self) -> None:
        """Put the previous handlers back."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    @property
    def stopping(self) -> tuple[int, ...]:
        """The signals that end the job."""
        return tuple(int(s) for s in self._stopping)

    def settle(self) -> None:
        """The exit code is decided: from now on these signals are ignored, not recorded.

        Under srun --kill-on-bad-exit another node's exit makes SLURM SIGTERM this
        launcher while it is leaving; dying of it would turn the job's verdict (the
        root-cause rank's code, the same on every node) into 143.
        """
        for sig in self._signals:
            signal.signal(sig, signal.SIG_IGN)
        self._previous.clear()

    @property
    def pending(self) -> tuple[int, ...]:
        """The stopping signals received and not taken yet (they stay pending)."""
        return tuple(self._pending)

    def take(self) -> list[int]:
        """The stopping signals received since the last take(), oldest first."""
        taken, self._pending = self._pending, []
        return taken

    def take_passed_on(self) -> list[int]:
        """SIGUSR1/SIGUSR2 received since the last call, oldest first."""
        taken, self._passed = self._passed, []
        return taken

    def take_merged(self) -> list[tuple[int, float]]:
        """Repeats folded into an earlier request: (signal, seconds after it)."""
        taken, self._merged = self._merged, []
        return taken

    def _record(self, signum: int, frame: FrameType | None) -> None:
        try:
            self._keep(signum)
        finally:
            self.wake()

    def _keep(self, signum: int) -> None:
        if signum in PASSED_ON:
            self._passed.append(signum)
            return
        now = time.monotonic()
        first = self._first_at.get(signum)
        if signum in _MERGED and first is not None and now - first < REPEAT_WINDOW:
            self._merged.append((signum, now - first))
            return
        self._first_at.setdefault(signum, now)
        self._pending.append(signum)
        global _stop_requested
        _stop_requested = True


def _nothing() -> None:
    """No loop to wake (before the ranks start, and after)."""
