"""MASTER_PORT reservation: concurrent jobs never share a port."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from safelaunch.preflight import ports


def _reserve_and_hold(start: multiprocessing.synchronize.Event, out, done) -> None:
    start.wait()
    reservation = ports.reserve_free_port()
    out.put(reservation.port)
    done.wait()  # hold the lock while the others reserve


def test_simultaneous_reservations_get_distinct_ports() -> None:
    ctx = multiprocessing.get_context("fork")
    start, done, out = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_reserve_and_hold, args=(start, out, done)) for _ in range(16)]
    for proc in procs:
        proc.start()
    start.set()
    got = [out.get(timeout=20) for _ in procs]
    done.set()
    for proc in procs:
        proc.join(10)
    assert len(set(got)) == len(got)


def test_a_port_held_by_another_job_is_skipped_even_if_the_kernel_offers_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(ports, "LOCK_DIR", tmp_path)
    first = ports.reserve_free_port()
    offers = iter([first.port, first.port])
    real = ports._kernel_free_port
    monkeypatch.setattr(ports, "_kernel_free_port", lambda: next(offers, None) or real())
    second = ports.reserve_free_port()
    assert second.port != first.port
    with pytest.raises(ports.PortInUse, match="held by another safelaunch job"):
        ports.reserve_port(first.port)
    first.release()
    ports.reserve_port(first.port).release()  # free again once released
    second.release()
