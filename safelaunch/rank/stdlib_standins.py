"""Inside a rank: what it needs of `signal`, `threading`, `contextlib` and `functools`,
from their C cores.

The bootstrap runs in every rank before the user's first line. Those four modules cost an
empty rank 5-7 ms of CPU out of ~24 ms (python -S -X importtime, minimum of 20 runs):
`signal` builds enums (enum, functools, collections), `threading` imports functools and
weak sets, `contextlib` is a large module. What a rank uses of them is a few names on
top of `_signal` and `_thread`, which cost nothing. A script that needs the modules
imports them itself (torch does), so no rank pays them twice.
"""

from __future__ import annotations

import _thread

TYPE_CHECKING = False  # `typing` costs every rank ~2 ms at start; only the checker needs it
if TYPE_CHECKING:
    import signal as signals  # typeshed has no stubs for `_signal`: the same functions
    from collections.abc import Callable
    from types import TracebackType
    from typing import Any
else:
    import _signal as signals

__all__ = ["Bell", "Flag", "Lock", "get_ident", "signals", "start_thread", "suppress", "wraps"]

Lock = _thread.allocate_lock  # threading.Lock is this very function
get_ident = _thread.get_ident


class suppress:  # contextlib's name, for what it stands in for
    """contextlib.suppress: the listed exceptions end the block and go no further."""

    def __init__(self, *kinds: type[BaseException]) -> None:
        self._kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        return kind is not None and issubclass(kind, self._kinds)


class Flag:
    """threading.Event's set() and wait(timeout), for one waiting thread: a lock held until
    set() releases it."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def set(self) -> None:
        with suppress(RuntimeError):  # set already
            self._lock.release()

    def wait(self, timeout: float) -> bool:
        """True once set (at once from then on), False after `timeout` seconds."""
        if not self._lock.acquire(timeout=timeout):
            return False
        with suppress(RuntimeError):  # a second set() released it meanwhile: still set
            self._lock.release()
        return True


class Bell:
    """A wake-up for one waiting thread: ring() ends its wait under way, or its next one.
    Rings before a wait count once."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def ring(self) -> None:
        with suppress(RuntimeError):  # rung already, and not yet heard
            self._lock.release()

    def wait(self, timeout: float) -> bool:
        """True when rung (the ring is then heard), False after `timeout` seconds."""
        return self._lock.acquire(timeout=timeout)


def start_thread(target: Callable[..., object], *args: object) -> None:
    """Run `target(*args)` in a thread the interpreter does not wait for at exit, as a
    daemon threading.Thread. It must not raise: nothing reports what escapes it."""
    _thread.start_new_thread(target, args)


def wraps(real: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """functools.wraps, imported when first used: only wrappers of torch's functions use
    it, and torch has loaded functools by then."""
    import functools

    return functools.wraps(real)
