"""Elastic rounds (rendezvous/rounds.py, admission.py): who left, who joined, the count.

Pure parts with tables and generated histories; the watch over an in-memory store and a
fake clock. The real thing, three launchers on loopback: test_elastic.py.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from safelaunch.diagnose.nodes import NodeSummary, conclude_job
from safelaunch.outcome import AttemptStatus
from safelaunch.rendezvous import Placement, stops
from safelaunch.rendezvous.admission import AdmitWatch
from safelaunch.rendezvous.membership import Joined, Membership
from safelaunch.rendezvous.rounds import Round, RoundCause, change_line, change_record, my_record
from safelaunch.rendezvous.rounds import round_of as draw


def _record(
    launcher: str, host: str, before: list[str], attempt: int = 0, count: int = 0
) -> dict[str, Any]:
    """`launcher`'s record: it was node before.index(launcher) of the round `before` (its
    nodes' launchers in order, hosts h-<x>), or new."""
    prev = Round(
        attempt=0, restart_count=0, token="t-" + "".join(before), hosts=_hosts(before),
        nodes_before=0, left=(), left_hosts=(), joined=(),
    )  # fmt: skip
    came = launcher in before
    place = before.index(launcher) if came else 0
    return {"host": host, **my_record(attempt, count, prev if came else None, place)}


def _hosts(launchers: list[str]) -> tuple[str, ...]:
    return tuple(f"h-{x}" for x in launchers)


def round_of(records: list[dict[str, Any]], before: list[str] | None = None) -> Round:
    """Node 0's draw, knowing the previous round's hosts (its own, or written for it)."""
    return draw(records, "t-new", _hosts(before or []))


def test_the_first_round_changes_nothing() -> None:
    first = round_of([_record("a", "h-a", []), _record("b", "h-b", [])])
    assert first.first and first.left == () and first.joined == ()
    assert (first.attempt, first.restart_count, first.token, first.nodes_before) == (
        0,
        0,
        "t-new",
        0,
    )


def test_a_late_node_takes_the_jobs_attempt_and_count_and_is_named_alike() -> None:
    # a and b ran attempts 0-2 (one restart); c starts late and knows nothing
    records = [
        _record("c", "h-c", []),  # torch numbered the new node first this round
        _record("a", "h-a", ["a", "b"], attempt=3, count=1),
        _record("b", "h-b", ["a", "b"], attempt=3, count=1),
    ]
    change = round_of(records, ["a", "b"])
    assert (change.attempt, change.restart_count) == (3, 1)
    assert change.cause is RoundCause.WAITING and change.joined == (0,) and change.left == ()
    assert change_record(change) == {
        "attempt": 3, "cause": "waiting", "left": [], "left_in_attempt": None,
        "joined": ["node 0 (h-c)"], "restart_count": 1, "nodes_before": 2, "nodes": 3,
        "hosts": ["h-c", "h-a", "h-b"],
    }  # fmt: skip
    line = change_line(change, max_restarts=3)
    assert line == (
        "elastic: attempt 3: node 0 (h-c) joined: 2 -> 3 node(s); not counted as a restart "
        "(torchrun's rule), 1 of 3 used"
    )


def test_a_lost_node_is_named_as_the_previous_round_numbered_it() -> None:
    before = ["a", "x", "b"]
    change = round_of(
        [_record("a", "h-a", before, 1, 1), _record("b", "h-b", before, 1, 1)], before
    )
    assert change.cause is RoundCause.LOST and change.left_names() == ["node 1 (h-x)"]
    assert change_record(change)["left_in_attempt"] == 0
    assert "node 1 (h-x) left: 3 -> 2 node(s); a restart, 1 of 3 used" in change_line(change, 3)


def test_lost_and_joined_in_one_round_is_a_restart() -> None:
    change = round_of([_record("a", "h-a", ["a", "x"], 2, 1), _record("n", "h-n", [])], ["a", "x"])
    assert change.cause is RoundCause.LOST and change.left == (1,) and change.joined == (1,)
    assert "node 1 (h-x) left and node 1 (h-n) joined: 2 -> 2 node(s); a restart" in (
        change_line(change, 3)
    )


@given(
    before=st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6, unique=True),
    after=st.lists(st.sampled_from("abcdefghij"), min_size=1, max_size=6, unique=True),
    count=st.integers(0, 5),
)
def test_every_node_draws_the_same_round_and_it_accounts_for_every_launcher(
    before: list[str], after: list[str], count: int
) -> None:
    """Old nodes bring the previous round; new ones nothing: whoever reads, one answer."""
    records = [
        _record(x, f"h-{x}", before, attempt=4, count=count) if x in before else _record(x, "n", [])
        for x in after
    ]
    change = round_of(records, before)
    kept = [x for x in after if x in before]
    if not kept:  # no node of the previous round: nothing tells of it
        assert change.first and change.attempt == 0
        return
    assert (change.attempt, change.restart_count) == (4, count)
    assert {before[n] for n in change.left} == set(before) - set(after)
    assert {after[n] for n in change.joined} == set(after) - set(before)
    assert change.nodes_before - len(change.left) + len(change.joined) == len(after)
    assert change.left_names() == [f"node {n} (h-{before[n]})" for n in change.left]
    assert round_of(list(reversed(records)), before).left == change.left  # any node order
    unknown = draw(records, "t", ())  # a node 0 that was not in that round, told nothing
    assert unknown.left == change.left and set(unknown.left_hosts) <= {"?"}


def _summary(node: int, status: str) -> NodeSummary:
    return NodeSummary(
        node=node, host=f"h{node}", status=AttemptStatus(status), code=0, root_rank=None,
        ending=None, consequence=False,
    )  # fmt: skip


def test_a_stop_to_admit_nodes_is_the_jobs_verdict_not_a_failure() -> None:
    joining = stops.nodes_joining(1, 0, 1)
    job = conclude_job([_summary(0, "rescaled"), _summary(1, "rescaled")], ["a", "b"], joining, 2)
    assert job.status == "rescaled" and job.code == 0 and not job.lines and not job.retryable
    # a rank that died of the others' stop a moment before its own: still the admission's
    job = conclude_job([_summary(0, "failed"), _summary(1, "rescaled")], ["a", "b"], joining, 2)
    assert job.status == "rescaled"
    # a node lost meanwhile: a failure, as without the admission
    lost = conclude_job([_summary(0, "rescaled"), None], ["a", "b"], joining, 2)
    assert lost.status == "failed" and lost.lost == (1,)
    # another node's failure announced first: that failure is the verdict
    failed = conclude_job(
        [_summary(0, "rescaled"), _summary(1, "failed")],
        ["a", "b"],
        stops.rank_failed(1, 0, 1, 1),
        2,
    )
    assert failed.status == "failed"


class _Store:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.data[key]

    def add(self, key: str, amount: int) -> int:
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def clone(self) -> _Store:  # the beat's own connection
        return self


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _member(store: _Store, node: int, waiting: list[int]) -> Membership:
    place = Placement(
        node=node, nodes=2, base_rank=node, world_size=2, master_addr="a", master_port=1,
        run_id="r", hosts=("a", "b"), nprocs=(1, 1),
    )  # fmt: skip
    joined = Joined(
        node=node, nodes=2, master_addr="a", master_port=1, shutdown=lambda: None,
        waiting=lambda: waiting[0],
    )  # fmt: skip
    return Membership(store, joined, place, lost_after=60, beat_every=30)


def test_a_waiting_node_stops_the_attempt_on_every_node_once_one_sees_it() -> None:
    store, clock, waiting = _Store(), _Clock(), [0]
    first = AdmitWatch(_member(store, 0, waiting), 0, every=1.0, clock=clock)
    other = AdmitWatch(_member(store, 1, [0]), 0, every=1.0, clock=clock)  # never looks itself
    assert first.poll() is None
    waiting[0] = 1
    assert first.poll() is None  # within the second since its last look: not asked
    clock.now += 1.5
    stop = first.poll()
    assert stop is not None and stop.kind is stops.StopKind.NODES_JOINING and stop.node == 0
    assert "1 node(s) wait to join" in stop.shown
    seen = other.poll()  # node 1 reads node 0's announcement
    assert seen == stop


def test_a_store_that_fails_the_look_is_left_to_the_node_watch() -> None:
    def broken() -> int:
        raise ConnectionError("gone")

    clock = _Clock()
    membership = _member(_Store(), 0, [0])
    membership._joined = Joined(
        node=0, nodes=2, master_addr="a", master_port=1, shutdown=lambda: None, waiting=broken
    )
    watch = AdmitWatch(membership, 0, every=1.0, clock=clock)
    clock.now += 2
    assert watch.poll() is None


def test_an_attempt_stopped_to_admit_nodes_is_a_running_job_to_prometheus() -> None:
    from safelaunch.metrics_export import _job_state

    assert _job_state(None, {"status": "rescaled", "job": {"status": "rescaled"}}) == "running"
    assert _job_state(None, {"status": "failed", "job": {"status": "failed"}}) == "failed"


def test_an_elastic_round_of_one_node_uses_the_launchers_workers_store() -> None:
    """--nnodes 1:3 down to one node: node 0's launcher still serves the workers' store
    at MASTER_PORT, so its ranks connect to it (rank 0 listening there: EADDRINUSE)."""
    from pathlib import Path
    from types import MappingProxyType

    from safelaunch.config import LaunchConfig
    from safelaunch.plan import RunIdentity, build_plan
    from safelaunch.preflight import PortReservation, PreflightReport

    place = Placement(
        node=0, nodes=1, base_rank=0, world_size=2, master_addr="m", master_port=7,
        run_id="r", hosts=("a",), nprocs=(2,),
    )  # fmt: skip
    config = LaunchConfig(training_script="t.py", environ=MappingProxyType({"PATH": "/bin"}))
    report = PreflightReport(
        nproc=2, nproc_reason="test", master_addr="x", master_port=PortReservation(29511, None)
    )
    run = RunIdentity(
        run_id="r1", run_dir=Path("/l/r1"), token="t", private_dir=Path("/p"), launcher_pid=1
    )
    for worker in build_plan(config, report, run, 1, placement=place).workers:
        assert worker.env["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        assert (worker.env["MASTER_ADDR"], worker.env["MASTER_PORT"]) == ("m", "7")
