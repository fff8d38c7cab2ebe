"""The pure hang rules on a fake clock."""

from __future__ import annotations

from pathlib import Path

import builders
import pytest

from safelaunch.hangs.activity import ActivityWatch, TreeCounters, worked
from safelaunch.hangs.detection import (
    RENDEZVOUS_ALLOWANCE,
    STARTUP_ALLOWANCE,
    RankProgress,
    is_hung,
    last_progress,
)
from safelaunch.rundir.heartbeat_file import Beat

AT_REDUCE = (("/v/site-packages/torch/distributed/distributed_c10d.py", 9, "all_reduce"),)
IN_INIT = (
    ("/v/torch/distributed/rendezvous.py", 1, "_create_c10d_store"),
    ("/v/torch/distributed/distributed_c10d.py", 2, "init_process_group"),
)


def _beat(since: float, frames=AT_REDUCE, time: float | None = None) -> Beat:
    return builders.beat(since=since, frames=frames, time=time, seq=4)


def _progress(rank: int, since: float, frames=AT_REDUCE, time: float | None = None) -> RankProgress:
    beat = _beat(since, frames, time)
    return RankProgress(rank=rank, last_progress=last_progress(beat, None, 0.0, True), beat=beat)


def test_hung_only_when_every_rank_is_idle_past_the_timeout() -> None:
    ranks = [_progress(0, 100.0), _progress(1, 100.0)]
    assert not is_hung(ranks, now=104.9, timeout=5, interval=0.5)
    assert is_hung(ranks, now=105.1, timeout=5, interval=0.5)
    ranks[1] = _progress(1, 104.0)  # one rank still moving: a checkpoint, not a hang
    assert not is_hung(ranks, now=105.1, timeout=5, interval=0.5)


def test_output_and_startup_count_as_signs_of_life() -> None:
    assert last_progress(_beat(10.0), last_output=50.0, spawned_at=0.0, bootstrapped=True) == 50.0
    # no record yet from a python rank: python is still starting
    assert last_progress(None, None, spawned_at=7.0, bootstrapped=True) == 7.0 + STARTUP_ALLOWANCE
    assert last_progress(None, None, spawned_at=7.0, bootstrapped=False) == 7.0


def test_ranks_reporting_from_the_rendezvous_get_the_allowance() -> None:
    now = 100.0 + RENDEZVOUS_ALLOWANCE - 1
    ranks = [_progress(r, 100.0, IN_INIT, time=now) for r in (0, 1)]  # records fresh
    assert not is_hung(ranks, now=now, timeout=2, interval=0.2)
    now = 100.0 + RENDEZVOUS_ALLOWANCE + 1
    ranks = [_progress(r, 100.0, IN_INIT, time=now) for r in (0, 1)]
    assert is_hung(ranks, now=now, timeout=2, interval=0.2)


def test_a_rank_frozen_inside_the_rendezvous_gets_no_allowance() -> None:
    # its last record was written in init_process_group, then it stopped writing
    ranks = [_progress(0, 100.0, IN_INIT, time=100.0), _progress(1, 100.0, AT_REDUCE)]
    assert is_hung(ranks, now=103.0, timeout=2, interval=0.2)


def test_no_live_rank_is_no_hang() -> None:
    assert not is_hung([], now=1e9, timeout=1, interval=0.1)


def test_heartbeat_is_a_no_op_outside_safelaunch() -> None:
    import safelaunch
    from safelaunch.rank import beat

    assert beat._active is None
    safelaunch.heartbeat(step=3)  # nothing listens: no error, nothing started
    assert beat._active is None


def _usage(
    own: float = 0.0, child: float = 0.0, io: int = 0, on_disk: bool = False
) -> TreeCounters:
    return TreeCounters(own_cpu=own, child_cpu=child, io=io, on_disk=on_disk)


@pytest.mark.parametrize(
    ("now", "elapsed", "spins", "counts"),
    [
        (_usage(), 1.0, False, False),  # nothing at all
        (_usage(own=0.01), 10.0, False, False),  # an idle rank's crumbs
        (_usage(own=0.3), 2.0, False, True),  # the rank computes (heartbeat starved or not)
        (_usage(own=0.3), 2.0, True, False),  # NCCL: its own CPU proves nothing
        (_usage(child=0.3), 2.0, True, True),  # ... its children's does
        (_usage(child=0.4), 10.0, False, False),  # 4% of a core: below the share
        (_usage(io=200 * 1024), 0.5, False, False),  # below the floor
        (_usage(io=1024 * 1024), 2.0, False, True),  # a slow upload
        (_usage(io=1024 * 1024), 60.0, False, False),  # heartbeat-sized writes over a minute
        (_usage(on_disk=True), 1.0, False, True),  # waiting on the disk
    ],
)
def test_what_counts_as_work_in_a_ranks_process_tree(
    now: TreeCounters, elapsed: float, spins: bool, counts: bool
) -> None:
    assert (worked(_usage(), now, elapsed, spins) is not None) is counts


def test_the_heartbeat_threads_own_cpu_is_not_the_ranks_work() -> None:
    watch = ActivityWatch()
    beat = Beat(rank=0, time=0, since=0, frames=(), step=None, seq=None, cost=0.0)
    watch.update({0: _usage(own=1.0)}, {0: beat}, now=100.0)
    spent = Beat(rank=0, time=0, since=0, frames=(), step=None, seq=None, cost=0.5)
    watch.update({0: _usage(own=1.5)}, {0: spent}, now=101.0)  # all of it the heartbeat's
    assert 0 not in watch.last_work
    watch.update({0: _usage(own=2.0)}, {0: spent}, now=102.0)
    assert watch.last_work[0] == 102.0


def test_ranks_frozen_at_one_line_are_one_group_with_no_culprit() -> None:
    """Two ranks stuck at the same line (native code holding the GIL), silent 3.5 and 3.8 s
    and in different process states: one group, no odd one out, however the seconds and
    letters differ (an audit saw rank 1 named culprit for 0.3 s more of silence)."""
    from safelaunch.hangs.analysis import _culprits, _group
    from safelaunch.hangs.detection import HangEvidence

    here = (("/job/train.py", 5, "<module>"),)
    beats = [
        Beat(rank=r, time=t, since=90.0, frames=here, step=None, seq=None)
        for r, t in ((0, 96.5), (1, 96.2))
    ]
    evidence = HangEvidence(
        detected_at=100.0,
        timeout=4.0,
        interval=0.5,
        ranks=tuple(RankProgress(rank=b.rank, last_progress=90.0, beat=b) for b in beats),
        states={0: "S", 1: "R"},
        stack_files={},
    )
    groups = _group(evidence)
    assert len(groups) == 1 and groups[0].ranks == (0, 1)
    assert groups[0].frozen == (
        "no heartbeat for 3.5-3.8 s (process state R/S): frozen, or native code holding the GIL"
    )
    assert _culprits(groups, []) == (
        (),
        "every rank is at the same place: look for a cause outside the job",
    )


@pytest.mark.parametrize("world", [2, 3, 4, 6])
def test_stale_heartbeats_of_most_ranks_waiting_in_a_collective_blame_the_one_outside(
    world: int,
) -> None:
    """A loaded machine starves the beat threads of ranks waiting in a collective; the rank
    outside it (sleeping in the loop, its heartbeat fresh) is the one they wait for, not
    them (a generated stop-the-world fault saw ranks 0-2 of 4 named "stopped responding")."""
    from safelaunch.hangs.analysis import _culprits, _group
    from safelaunch.hangs.detection import HangEvidence

    outside = world - 1
    sleeping = (("/job/train.py", 9, "train"),)
    beats = [
        Beat(rank=r, time=96.0 if r != outside else 99.8, since=90.0,
             frames=sleeping if r == outside else AT_REDUCE, step=None, seq=None)
        for r in range(world)
    ]  # fmt: skip
    evidence = HangEvidence(
        detected_at=100.0,
        timeout=4.0,
        interval=0.5,
        ranks=tuple(RankProgress(rank=b.rank, last_progress=90.0, beat=b) for b in beats),
        states={r: "R" if r != outside else "S" for r in range(world)},
        stack_files={},
    )
    culprits, why = _culprits(_group(evidence), [])
    assert culprits == (outside,), why


@pytest.mark.parametrize("seed", range(12))
def test_ranks_at_the_line_of_a_call_their_ledger_waits_in_are_waiting(seed: int) -> None:
    """A pipeline stage in irecv().wait() or isend().wait() has no frame of torch's: its
    stack is at its own line. Where its call ledger waits in a call at that line, it waits
    there; the stage stuck elsewhere (reading its data) is the one they wait for. With 3
    or more stages each at a line of its own, no stage was "not where the others are"."""
    import random

    from safelaunch.hangs.analysis import _culprits, _group
    from safelaunch.hangs.detection import HangEvidence

    rng = random.Random(seed)
    world = rng.randint(2, 6)
    stuck = rng.randrange(world)
    lines = {r: ("/job/train.py", 110 + 3 * r, "train") for r in range(world)}  # own lines
    lines[stuck] = ("/job/train.py", 50, "__getitem__")
    beats = [
        Beat(rank=r, time=99.8, since=90.0, frames=(lines[r],), step=None, seq=None)
        for r in range(world)
    ]
    evidence = HangEvidence(
        detected_at=100.0, timeout=4.0, interval=0.5,
        ranks=tuple(RankProgress(rank=b.rank, last_progress=90.0, beat=b) for b in beats),
        states=dict.fromkeys(range(world), "S"), stack_files={},
    )  # fmt: skip
    blocked = {r: {f"/job/train.py:{110 + 3 * r}"} for r in range(world) if r != stuck}
    culprits, why = _culprits(_group(evidence, {}, blocked), [])
    assert culprits == (stuck,), why
    if world >= 3:  # each at a line of its own, the ledgers unread: nobody singled out
        assert _culprits(_group(evidence), [])[0] == ()


def test_before_its_group_exists_a_rank_s_heartbeat_wakes_only_to_beat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing to sample before init_process_group, only beats to write: at 16 nodes x 2
    on 2 cores ranks wait ~40 s there, and each timed wake costs ~90 us of CPU on this VM
    (bench/scale.py --what start). init_process_group rings the thread: sampling starts
    then, not at the next beat."""
    import threading
    import time

    from safelaunch.rank import beat

    group = {"exists": False}
    monkeypatch.setattr(beat, "collective_sequence", lambda: 1 if group["exists"] else None)
    wakes: list[float] = []
    samples: list[float] = []
    beater = beat.Beater(str(tmp_path / "rank0.beat.json"), 0.5, threading.get_ident())
    monkeypatch.setattr(beater, "beat", lambda final=False: wakes.append(time.monotonic()))
    monkeypatch.setattr(beater, "sample", lambda: samples.append(time.monotonic()))
    monkeypatch.setattr(beat, "_active", beater)
    beater.start()
    try:
        time.sleep(1.6)
        assert not samples and 2 <= len(wakes) <= 4, wakes  # a beat every 0.5 s, no more
        cost_before = beater.cost
        group["exists"] = True
        rung = time.monotonic()
        beat.group_started()  # as init_process_group returns (rank/dist_hooks.py)
        time.sleep(1.0)
    finally:
        beater.halt()
    assert samples and samples[0] - rung < 0.25, (rung, samples)  # not the next beat, 0.5 s on
    assert len(samples) >= 0.5 / beat.SAMPLE_PERIOD, samples  # a loaded machine wakes it late
    assert cost_before < 0.05, cost_before


def test_before_its_group_exists_a_rank_s_beats_stay_on_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waking less often must not make the beats late: at --hang-timeout 3 they are 0.3 s
    apart, and the hang rule judges a rank by how old its record is."""
    import itertools
    import threading
    import time

    from safelaunch.rank import beat

    monkeypatch.setattr(beat, "collective_sequence", lambda: None)
    beats: list[float] = []
    beater = beat.Beater(str(tmp_path / "rank0.beat.json"), 0.3, threading.get_ident())
    monkeypatch.setattr(beater, "beat", lambda final=False: beats.append(time.monotonic()))
    beater.start()
    time.sleep(2.0)
    beater.halt()
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert len(beats) >= 5 and sorted(gaps)[len(gaps) // 2] < 0.36, gaps  # the median
