"""rank/stdlib_standins.py: the stand-ins for threading.Event, contextlib.suppress and daemon
threads that every rank uses before the user's code (what they replace cost 5-7 ms a rank)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from safelaunch.rank.stdlib_standins import Bell, Flag, Lock, start_thread, suppress


def test_a_flag_waits_until_set_and_stays_set() -> None:
    flag = Flag()
    started = time.monotonic()
    assert not flag.wait(0.05)
    assert time.monotonic() - started >= 0.04
    flag.set()
    assert flag.wait(5) and flag.wait(5)  # at once, every time from then on
    flag.set()  # twice: no error, still set
    assert flag.wait(0.01)


class _SetWhileHeld:
    """The flag's lock, with a second set() landing right after wait() acquired it."""

    def __init__(self, flag: Flag) -> None:
        self._flag, self._lock, self._raced = flag, flag._lock, False

    def acquire(self, timeout: float = -1) -> bool:
        got = self._lock.acquire(timeout=timeout)
        if got and not self._raced:
            self._raced = True
            self._flag.set()  # the heartbeat's stop() again: releases it under the waiter
        return got

    def release(self) -> None:
        self._lock.release()


def test_a_flag_set_again_while_its_waiter_holds_it_stays_set() -> None:
    flag = Flag()
    flag.set()
    flag._lock = _SetWhileHeld(flag)  # type: ignore[assignment]
    assert flag.wait(0.01)  # raised RuntimeError (release unlocked lock) in the thread
    assert flag.wait(0.01)


def _wakes_a_waiter(wait: Callable[[float], bool], wake: Callable[[], None]) -> bool:
    """`wake()` from this thread ends `wait` in another."""
    woke = Flag()

    def waiter() -> None:
        if wait(10):
            woke.set()

    start_thread(waiter)
    time.sleep(0.05)
    wake()
    return woke.wait(10)


def test_set_from_another_thread_wakes_the_waiter() -> None:
    flag = Flag()
    assert _wakes_a_waiter(flag.wait, flag.set)


def test_a_bell_ends_one_wait_per_ring_rung_before_or_during_it() -> None:
    bell = Bell()
    assert not bell.wait(0.02)
    bell.ring()
    bell.ring()  # rung twice before the wait: heard once
    assert bell.wait(0.01)
    assert not bell.wait(0.02)
    assert _wakes_a_waiter(bell.wait, bell.ring)


def test_suppress_swallows_only_what_it_names() -> None:
    with suppress(OSError):
        raise FileNotFoundError("gone")
    with pytest.raises(ValueError), suppress(OSError):
        raise ValueError("not an OSError")
    lock = Lock()
    with suppress(Exception), lock:
        raise RuntimeError("inside the lock")
    assert lock.acquire(blocking=False)  # released on the way out
