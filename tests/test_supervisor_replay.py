"""Replayed event histories for the supervisor's pure core: the teardown record and the
watchers, driven by a fake clock and scripted sources. No processes; milliseconds."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

import builders
import pytest

from safelaunch.plan import Timebox
from safelaunch.rendezvous import stops
from safelaunch.rendezvous.stops import NodeStop
from safelaunch.rundir.heartbeat_file import Beat
from safelaunch.supervisor import teardown
from safelaunch.supervisor.teardown import Teardown, TeardownCause
from safelaunch.supervisor.watchers import (
    HangWatch,
    PeerWatcher,
    StopReason,
    Throttle,
    TimeboxWatch,
    Watcher,
    idle_wait,
    poll_all,
)

GRACE = 5.0  # the shutdown timeout the histories use


@dataclass
class FakeClock:
    t: float = 100.0
    wall_offset: float = 1_700_000_000.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.t + self.wall_offset


def replay(events: Sequence[tuple[float, str, object]]) -> list[tuple[float, str, object]]:
    """Drive the teardown record as the loop does: each event at its time, then a tick.

    Events: ("fail", None) a rank failed; ("signal", signum) to the launcher; ("stop",
    cause) a watcher's reason; ("tick", None). Returns the actions the loop would take.
    """
    state = teardown.RUNNING
    interrupt: int | None = None
    actions: list[tuple[float, str, object]] = []
    for now, event, arg in events:
        if event == "fail" and state.running:
            state = teardown.begin(state, TeardownCause.RANK_FAILED, signal.SIGTERM, now, GRACE)
            actions.append((now, "send", signal.SIGTERM))
        elif event == "signal" and isinstance(arg, int):
            act = teardown.on_signal(state, interrupt is not None, explains=False)
            if act == "begin":
                interrupt = arg
                state = teardown.begin(state, TeardownCause.SIGNAL, arg, now, GRACE)
                actions.append((now, "send", arg))
            elif act == "noted":
                interrupt = arg  # already stopping: SIGKILL at the deadline as planned
            elif act == "kill now":
                state = teardown.kill_now(state, now)
        elif event == "stop" and isinstance(arg, TeardownCause) and state.running:
            state = teardown.begin(state, arg, signal.SIGTERM, now, GRACE)
            actions.append((now, "send", signal.SIGTERM))
        state, kill = teardown.tick(state, now)
        if kill:
            actions.append((now, "send", signal.SIGKILL))
    actions.append((-1.0, "final", state))
    return actions


def test_rank_failure_then_deadline_kills_once() -> None:
    actions = replay([(1.0, "fail", None), (3.0, "tick", None), (6.0, "tick", None)])
    assert actions[:2] == [(1.0, "send", signal.SIGTERM), (6.0, "send", signal.SIGKILL)]
    final = actions[2][2]
    assert isinstance(final, Teardown)
    assert (final.phase, final.cause, final.began_at, final.deadline) == (
        "killed",
        TeardownCause.RANK_FAILED,
        1.0,
        6.0,
    )


def test_first_cause_wins_and_a_later_one_sends_nothing() -> None:
    actions = replay(
        [(1.0, "stop", TeardownCause.HANG), (2.0, "fail", None), (2.5, "stop", TeardownCause.PEER)]
    )
    assert actions[:-1] == [(1.0, "send", signal.SIGTERM)]
    final = actions[-1][2]
    assert isinstance(final, Teardown) and final.cause is TeardownCause.HANG


def test_signal_while_stopping_waits_for_deadline_and_a_second_kills_now() -> None:
    first = replay([(1.0, "fail", None), (2.0, "signal", signal.SIGINT), (3.0, "tick", None)])
    assert (3.0, "send", signal.SIGKILL) not in first  # the deadline (6.0) is as planned
    again = [(1.0, "fail", None), (2.0, "signal", signal.SIGINT), (3.0, "signal", signal.SIGINT)]
    assert (3.0, "send", signal.SIGKILL) in replay(again)


def test_signal_kill_now_after_kill_kills_again() -> None:
    history = [
        (0.0, "signal", signal.SIGTERM),
        (5.0, "tick", None),  # deadline: killed
        (5.5, "signal", signal.SIGTERM),  # again: the same request kills once more
    ]
    kills = [a for a in replay(history) if a[1] == "send" and a[2] == signal.SIGKILL]
    assert [t for t, _, _ in kills] == [5.0, 5.5]


def test_a_signal_the_ranks_got_first_turns_the_failure_teardown_into_the_interrupt() -> None:
    failing = teardown.begin(teardown.RUNNING, TeardownCause.RANK_FAILED, 15, 10.0, GRACE)
    assert teardown.on_signal(teardown.RUNNING, False, explains=False) == "begin"
    assert teardown.on_signal(failing, False, explains=True) == "reached first"
    assert teardown.on_signal(failing, False, explains=False) == "noted"
    assert teardown.on_signal(failing, True, explains=True) == "kill now"


def test_recause_and_moved_back_keep_the_deadline() -> None:
    state = teardown.begin(teardown.RUNNING, TeardownCause.RANK_FAILED, 15, 10.0, GRACE)
    state = teardown.moved_back(teardown.recause(state, TeardownCause.SIGNAL), 9.5)
    assert (state.cause, state.began_at, state.deadline, state.phase) == (
        TeardownCause.SIGNAL,
        9.5,
        15.0,
        "stopping",
    )


def test_causes_keep_the_strings_written_to_report_json() -> None:
    import json

    assert [c.value for c in TeardownCause] == [
        "rank failed",
        "signal",
        "hang",
        "peer",
        "passed",
        "timebox",
    ]
    assert json.dumps({"cause": TeardownCause.RANK_FAILED}) == '{"cause": "rank failed"}'
    assert TeardownCause("peer") is TeardownCause.PEER and f"{TeardownCause.HANG}" == "hang"
    assert isinstance(TeardownCause.PEER, str)  # outcome compares it with plain strings


# --- watchers --------------------------------------------------------------------------


_progress = builders.progress


def _beat(rank: int, *, step: int | None = None, seq: int | None = None) -> Beat:
    return builders.beat(rank, step=step, seq=seq)


def test_hang_watch_fires_only_once_every_rank_is_quiet_past_the_timeout() -> None:
    clock = FakeClock()
    wall0 = clock.wall()
    last = {0: wall0, 1: wall0}
    samples: list[float] = []
    hang = HangWatch(
        clock=clock,
        progress=lambda: [_progress(r, t) for r, t in last.items()],
        sample=lambda: samples.append(clock.t),
        sample_every=1.0,
        timeout=10.0,
        interval=0.5,
    )
    reason: StopReason | None = None
    for step in range(1, 60):  # one poll every half second
        clock.t = 100.0 + step * 0.5
        if clock.t <= 104.0:
            last[1] = clock.wall()  # rank 1 still works for 4 s
        reason = hang.poll(clock.t)
        if reason is not None:
            break
    # rank 0 is quiet from t=110 on, but rank 1 (last progress at t=104) only from t=114.5
    assert clock.t == 114.5
    assert reason is not None and reason.cause is TeardownCause.HANG
    assert [p.rank for p in reason.progress] == [0, 1]
    assert reason.detected_at == 114.5 + clock.wall_offset
    assert samples == [100.5 + i for i in range(15)]  # /proc at its own slower pace


class ScriptedPeers:
    def __init__(self, events: dict[float, NodeStop], clock: FakeClock) -> None:
        self.events = events
        self.clock = clock

    def poll(self) -> NodeStop | None:
        return self.events.get(self.clock.t)


@pytest.mark.parametrize(
    ("event", "live", "cause", "say"),
    [
        (stops.rank_failed(1, 0, 5, 1), [0], TeardownCause.PEER, True),
        (stops.hang(1, 0, 10), [0], TeardownCause.HANG, False),
        (stops.hang(1, 0, 10), [], TeardownCause.PEER, True),
    ],
)
def test_peer_watcher(event: NodeStop, live: list[int], cause: TeardownCause, say: bool) -> None:
    clock = FakeClock()
    peers = ScriptedPeers({101.0: event}, clock)
    ranks = [_progress(r, 0) for r in live]
    watcher = PeerWatcher(clock=clock, peers=peers, progress=lambda: ranks)
    assert watcher.poll(clock.t) is None
    clock.t = 101.0
    reason = watcher.poll(clock.t)
    assert reason is not None and reason.cause is cause and reason.peer_event == event
    assert bool(reason.say) is say


def test_timebox_watch_past_the_step_then_cap() -> None:
    box = Timebox(past_step=3, past_seq=None, after_s=None, cap_s=60.0)
    beats: list[Beat | None] = [_beat(0, step=4), None]
    watch = TimeboxWatch(box=box, started_at=100.0, beats=lambda: beats)
    assert watch.poll(110.0) is None  # a rank not reporting yet
    beats[1] = _beat(1, step=5)
    assert watch.poll(111.0) is None  # rank 0 is only one step past: may be the point itself
    beats[0] = _beat(0, step=5)
    passed = watch.poll(112.0)
    assert passed is not None and passed.cause is TeardownCause.PASSED
    assert passed.note == "every rank is past step 3, where the job had got to"
    beats[:] = [_beat(0, step=1)]
    capped = watch.poll(160.0)
    assert capped is not None and capped.cause is TeardownCause.TIMEBOX
    assert capped.note == "still running at the 60 s cap (--isolate-timeout)"
    beats.clear()
    assert watch.poll(200.0) is None  # no live rank: nothing to stop


class Recorder:
    def __init__(self, name: str, log: list[tuple[str, float]], fire_at: float | None) -> None:
        self.name, self.log, self.fire_at = name, log, fire_at

    def poll(self, now: float) -> StopReason | None:
        self.log.append((self.name, now))
        if self.fire_at is not None and now >= self.fire_at:
            return StopReason(cause=TeardownCause.HANG)
        return None


def test_throttled_watchers_share_one_throttle_and_the_first_reason_wins() -> None:
    log: list[tuple[str, float]] = []
    peer: list[Watcher] = [Recorder("peer", log, None)]
    throttled: list[Watcher] = [Recorder("hang", log, 1.0), Recorder("box", log, None)]
    throttle = Throttle(0.5)
    results = [poll_all(peer, throttled, throttle, t) for t in (0.0, 0.2, 0.5, 0.7, 1.0)]
    assert log == [
        ("peer", 0.0),
        ("hang", 0.0),
        ("box", 0.0),
        ("peer", 0.2),
        ("peer", 0.5),
        ("hang", 0.5),
        ("box", 0.5),
        ("peer", 0.7),
        ("peer", 1.0),
        ("hang", 1.0),  # fires: the time-box watcher is not asked
    ]
    assert [r is not None for r in results] == [False, False, False, False, True]


@pytest.mark.parametrize(
    ("monitor", "paces", "wait"),
    [
        (0.1, [0.5, 1.0, 0.5], 0.25),  # the defaults: hang throttle, live state, other nodes
        (0.1, [0.1, 0.2], 0.1),  # a short heartbeat: never more often than the interval
        (5.0, [0.5, 1.0], 5.0),  # the user's longer interval wins
        (0.1, [], 0.5),  # nothing to look at: exits and signals wake it; still every 0.5 s
        (0.1, [30.0], 0.5),
    ],
)
def test_the_loop_sleeps_half_its_shortest_look_pace_never_below_the_monitor_interval(
    monitor: float, paces: list[float], wait: float
) -> None:
    assert idle_wait(monitor, paces) == pytest.approx(wait)
