"""Signals to the launcher the way SLURM and people send them (no SLURM needed here).

SLURM's own delivery is tested on a real cluster in test_slurm.py.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import builders
import pytest
from conftest import assert_no_orphans, start, worker

from safelaunch.rendezvous import stops
from safelaunch.supervisor import signals as signals_module
from safelaunch.supervisor.interrupts import expects_own_signal, signal_explains, stopped_from
from safelaunch.supervisor.signals import SignalReceiver
from safelaunch.supervisor.teardown import TeardownCause

pytestmark = pytest.mark.slow


def _ready(tmp_path: Path, proc, nproc: int) -> list[int]:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 60
    while len(files := list((tmp_path / "pids").glob("ready-*"))) < nproc:
        assert time.monotonic() < deadline, "ranks never became ready"
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    return [int(f.read_text()) for f in files]


def _report(tmp_path: Path) -> dict:  # type: ignore[type-arg]
    return builders.read_report(tmp_path / "logs" / "latest" / "attempt_0")


def _rank_log(tmp_path: Path, rank: int) -> str:
    return (tmp_path / "logs" / "latest" / "attempt_0" / f"rank{rank}.log").read_text()


def test_sigterm_twice_within_ms_is_one_request_and_checkpoints_finish(tmp_path: Path) -> None:
    """A hard SLURM time limit: the step daemon and srun each send SIGTERM, ms apart."""
    proc, mark = start(
        tmp_path, "--nproc-per-node=2", worker("signal_rank.py"), env={"SAVE_S": "2"}
    )
    _ready(tmp_path, proc, 2)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)  # sent together, the kernel would merge them into one
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    text = err.decode()
    assert proc.returncode == 143, text
    assert "the same request (SLURM sends it twice at a time limit), not escalated" in text
    assert "killing now" not in text
    for rank in (0, 1):  # not SIGKILLed mid-save
        assert "saved" in _rank_log(tmp_path, rank), _rank_log(tmp_path, rank)
    assert _report(tmp_path)["status"] == "interrupted"
    assert_no_orphans(mark, within=3.0)


def test_a_second_ctrl_c_still_kills_at_once(tmp_path: Path) -> None:
    proc, mark = start(
        tmp_path, "--nproc-per-node=2", worker("signal_rank.py"), env={"SAVE_S": "60"}
    )
    _ready(tmp_path, proc, 2)
    proc.send_signal(signal.SIGINT)  # the ranks are in their own sessions: only via safelaunch
    time.sleep(0.3)
    assert proc.poll() is None  # SIGINT forwarded; ranks would take 30 s to die
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130
    assert "received SIGINT again: killing now" in err.decode()
    assert_no_orphans(mark, within=3.0)


def test_sigusr1_and_sigusr2_reach_every_rank_once_and_the_job_goes_on(tmp_path: Path) -> None:
    proc, mark = start(tmp_path, "--nproc-per-node=2", worker("signal_rank.py"), env={"RUN_S": "4"})
    _ready(tmp_path, proc, 2)
    proc.send_signal(signal.SIGUSR1)
    time.sleep(0.3)
    proc.send_signal(signal.SIGUSR2)
    _, err = proc.communicate(timeout=60)
    text = err.decode()
    assert proc.returncode == 0, text
    assert "received SIGUSR1: passed on to 2 rank(s); the job goes on" in text
    for rank in (0, 1):
        log = _rank_log(tmp_path, rank)
        assert log.count("got SIGUSR1") == 1 and log.count("got SIGUSR2") == 1, log
        assert "received: SIGUSR1,SIGUSR2" in log
    assert _report(tmp_path)["status"] == "succeeded"
    assert_no_orphans(mark, within=3.0)


@pytest.mark.parametrize("gap", [0.05, 0.5], ids=["during-teardown", "after-every-rank-ended"])
def test_ranks_signalled_before_the_launcher_is_an_interrupt(tmp_path: Path, gap: float) -> None:
    """scancel signals every process of an srun step: the ranks may die first."""
    proc, mark = start(
        tmp_path, "--nproc-per-node=2", worker("signal_rank.py"), env={"SAVE_S": "0"}
    )
    ranks = _ready(tmp_path, proc, 2)
    for pid in ranks:
        os.kill(pid, signal.SIGTERM)
    time.sleep(gap)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    text = err.decode()
    assert proc.returncode == 143, text
    assert "FAILED" not in text and "interrupted by SIGTERM" in text
    report = _report(tmp_path)
    assert report["status"] == "interrupted"
    assert "died of SIGTERM" not in text  # stopped by the same request, not failed
    assert {r["state"] for r in report["ranks"]} == {"stopped"}, report["ranks"]
    assert_no_orphans(mark, within=3.0)


def test_receiver_folds_a_repeated_sigterm_only_inside_its_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    receiver = SignalReceiver([signal.SIGTERM, signal.SIGINT])
    receiver.install()
    try:
        for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGINT, signal.SIGINT, signal.SIGUSR1):
            os.kill(os.getpid(), sig)
        assert receiver.take() == [signal.SIGTERM, signal.SIGINT, signal.SIGINT]
        assert [s for s, _ in receiver.take_merged()] == [signal.SIGTERM]
        assert receiver.take_passed_on() == [signal.SIGUSR1]
        monkeypatch.setattr(signals_module, "REPEAT_WINDOW", 0.0)
        os.kill(os.getpid(), signal.SIGTERM)
        assert receiver.take() == [signal.SIGTERM]  # outside the window: a new request
    finally:
        receiver.restore()


def test_interrupt_rules_tell_slurms_signal_from_a_rank_failure() -> None:
    term = int(signal.SIGTERM)
    failed, peer = TeardownCause.RANK_FAILED, TeardownCause.PEER
    assert signal_explains(term, failed, [-15, 143], None)
    assert not signal_explains(term, failed, [-15, 1], None)  # a real failure too
    assert not signal_explains(term, TeardownCause.HANG, [-15], None)
    assert signal_explains(term, peer, [], stops.rank_failed(1, 0, 3, -15))
    assert signal_explains(term, peer, [], stops.rank_failed(1, 0, 3, 143))
    assert signal_explains(term, peer, [], stops.interrupted(1, 0, term))
    assert not signal_explains(term, peer, [], stops.interrupted(1, 0, int(signal.SIGINT)))
    assert not signal_explains(term, peer, [], stops.rank_failed(1, 0, 3, 1))
    assert not signal_explains(term, peer, [], stops.hang(1, 0, 10))
    assert expects_own_signal(failed, [-15, -2], [term, int(signal.SIGINT)])
    assert not expects_own_signal(failed, [-9], [term])  # SIGKILL: OOM, not SLURM
    assert stopped_from(term, 5.0, [(-15, 4.2), (143, 4.5), (1, 3.0), (0, 1.0)]) == 4.2
    assert stopped_from(term, 5.0, [(1, 3.0)]) == 5.0
