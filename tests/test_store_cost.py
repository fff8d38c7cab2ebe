"""What safelaunch asks of the job's store grows linearly with the nodes, in all (issue 29).

In-memory stand-ins for the store, counting operations per node; the real store and
real launchers: tests/test_multinode.py (4 nodes, one verdict) and bench/scale.py.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safelaunch.diagnose import job_json
from safelaunch.diagnose.arbiter import Item, Source, Tier, Verdict
from safelaunch.diagnose.nodes import JobVerdict
from safelaunch.hangs.rhythm import fixed
from safelaunch.outcome import AttemptStatus
from safelaunch.rendezvous import Placement
from safelaunch.rendezvous.live_exchange import digest, read_digest
from safelaunch.rendezvous.liveness import Liveness
from safelaunch.rendezvous.membership import Joined, Membership
from safelaunch.supervisor.watchers import HangWatch, PeerHang, SystemClock
from safelaunch.vocab import FailureClass


class Store:
    """One dict shared by every node; `ops` counts each node's operations."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.lock = threading.Lock()
        self.ops: Counter[int] = Counter()

    def client(self, node: int) -> Client:
        return Client(self, node)


class Client:
    def __init__(self, store: Store, node: int) -> None:
        self._s, self._node = store, node

    def _count(self) -> None:
        self._s.ops[self._node] += 1

    def set(self, key: str, value: str) -> None:
        self._count()
        with self._s.lock:
            self._s.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        self._count()
        with self._s.lock:
            return self._s.data[key]

    def add(self, key: str, amount: int) -> int:
        self._count()
        with self._s.lock:
            value = int(self._s.data.get(key, b"0")) + amount
            self._s.data[key] = str(value).encode()
            return value

    def check(self, keys: list[str]) -> bool:
        self._count()
        with self._s.lock:
            return all(k in self._s.data for k in keys)

    def clone(self) -> Client:  # the beat's own connection
        return Client(self._s, self._node)


def members(store: Store, nodes: int, lost_after: float = 60, beat_every: float = 0.02) -> list:
    hosts = tuple(f"h{n}" for n in range(nodes))
    found = []
    for node in range(nodes):
        place = Placement(
            node=node, nodes=nodes, base_rank=node, world_size=nodes, master_addr="a",
            master_port=1, run_id="r", hosts=hosts, nprocs=(1,) * nodes,
        )  # fmt: skip
        joined = Joined(node=node, nodes=nodes, master_addr="a", master_port=1, shutdown=lambda: 0)
        found.append(Membership(store.client(node), joined, place, lost_after, beat_every))
    return found


def _steady_ops(nodes: int, rounds: int = 6) -> Counter[int]:
    """Every node's operations over `rounds` beats: its beat, a supervisor poll, a share."""
    store = Store()
    group = members(store, nodes)
    watches = [m.watch(0) for m in group]
    snapshot = json.dumps({"ranks": [], "hang_deadline_s": 300.0, "hang_quiet_s": 1.0})
    for _ in range(rounds):
        for m, watch in zip(group, watches, strict=True):
            m.store.add(f"alive/{m.placement.node}", 1)
            assert watch.poll() is None
            watch._next = 0.0  # the next poll looks again (0.5 s later in a launch)
            watch.share(snapshot)
        time.sleep(0.03)  # past beat_every: the counters are looked at again
    return store.ops


def test_the_steady_cost_per_node_does_not_grow_with_the_nodes() -> None:
    """At 4, 16 and 64 nodes every node but node 0 asks the same few operations a beat,
    whatever the job's size; node 0 reads every counter and every snapshot: O(N) in all
    (it was every node reading every node's, N^2)."""
    per_other = {}
    for nodes in (4, 16, 64):
        ops = _steady_ops(nodes)
        others = {ops[n] for n in range(1, nodes)}
        assert len(others) == 1, ops  # each node alike, whatever its number
        per_other[nodes] = others.pop()
        assert ops[0] <= 6 * (3 * nodes + 4), ops[0]  # a counter, a check and a get per node
    assert per_other[4] == per_other[16] == per_other[64] <= 6 * 8, per_other


def test_node_0_publishes_the_lost_node_the_others_read_it() -> None:
    store = Store()
    group = members(store, 4, lost_after=0.1, beat_every=0.02)
    for m in group:
        m.store.add(f"alive/{m.placement.node}", 1)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for m in group[:3]:  # node 3 stops beating
            m.store.add(f"alive/{m.placement.node}", 1)
        found = [m.lost_nodes(time.monotonic()) for m in group[:3]]
        if all(found):
            break
        time.sleep(0.02)
    assert found == [[3], [3], [3]]
    looked = {k for k in store.data if k.startswith("alive/")}
    assert looked == {"alive/0", "alive/1", "alive/2", "alive/3"}
    assert json.loads(store.data["lost"]) == [3]


def test_a_lost_node_0_is_found_by_the_others_and_so_are_the_nodes_it_would_name() -> None:
    store = Store()
    group = members(store, 4, lost_after=0.1, beat_every=0.02)
    for m in group:
        m.store.add(f"alive/{m.placement.node}", 1)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for m in group[1:3]:  # nodes 0 and 3 stop beating
            m.store.add(f"alive/{m.placement.node}", 1)
        found = [m.lost_nodes(time.monotonic()) for m in group[1:3]]
        if all(len(f) == 2 for f in found):
            break
        time.sleep(0.02)
    assert found == [[0, 3], [0, 3]]


@pytest.mark.parametrize("seed", range(12))
def test_a_store_slow_for_everyone_calls_nobody_lost_a_stopped_node_is_found(seed: int) -> None:
    """Generated: N nodes, a stall of the store for everyone (no counter moves, as with 16
    launchers and 32 ranks importing torch on 2 cores), then a random node stops beating.
    The stall calls nobody lost, however long; the stopped node is found by every other
    node within lost_after and a few beats of the others going on."""
    rng = random.Random(seed)
    nodes, lost_after, beat = rng.randint(2, 12), rng.choice([3.0, 15.0]), 0.5
    store = Store()
    views = [Liveness(store.client(n), n, nodes, lost_after, beat) for n in range(nodes)]
    clock = 0.0

    def tick(beating: range | list[int]) -> list[list[int]]:
        nonlocal clock
        clock += beat / 2  # the supervisor's pace
        if int(clock / beat) != int((clock - beat / 2) / beat):
            for n in beating:
                store.client(n).add(f"alive/{n}", 1)
        return [views[n].lost(clock) for n in range(nodes) if n in beating]

    for _ in range(8):
        assert not any(tick(range(nodes)))
    stall = rng.uniform(lost_after + 1, 10 * lost_after)
    until = clock + stall
    while clock < until:  # nothing moves: the counters, this node's own included
        assert not any(tick([])) and not any(v.lost(clock) for v in views), clock
    for _ in range(8):
        assert not any(tick(range(nodes)))
    stopped = rng.randrange(nodes)
    others = [n for n in range(nodes) if n != stopped]
    since = clock
    while not all(found == [stopped] for found in tick(others)):
        assert clock - since < lost_after + 6 * beat, (clock - since, stopped, nodes)
    assert clock - since > lost_after


def test_the_others_print_node_0s_verdict_and_read_no_summary() -> None:
    store = Store()
    group = members(store, 8)
    for m in group:
        m.start_beating()
    job = JobVerdict(status=AttemptStatus.FAILED, code=1, lines=("FAILED on node 5",), lost=())
    results: dict[int, tuple[str | None, list[int]]] = {}

    class Patient:
        def poll(self, missing: list[int], waited: float) -> bool:
            return False

    def other(m: Membership) -> None:
        results[m.placement.node] = m.await_verdict(0, {"node": m.placement.node}, 30, Patient())

    threads = [threading.Thread(target=other, args=(m,)) for m in group[1:]]
    for thread in threads:
        thread.start()
    summaries = group[0].end_attempt(0, {"node": 0}, 30, Patient())
    assert [s["node"] for s in summaries] == list(range(8))
    group[0].publish_verdict(0, job_json.to_json(job))
    for thread in threads:
        thread.join(10)
    assert {n: job_json.from_json(t or "") for n, (t, _) in results.items()} == dict.fromkeys(
        range(1, 8), job
    )
    for m in group:
        m._stop_beating.set()


def test_a_node_0_that_stops_beating_leaves_the_others_to_judge() -> None:
    store = Store()
    group = members(store, 3, lost_after=0.2, beat_every=0.02)
    group[0].store.add("alive/0", 1)  # node 0 beat once, then its launcher died
    group[1].start_beating()

    class Patient:
        def poll(self, missing: list[int], waited: float) -> bool:
            return False

    started = time.monotonic()
    text, missing = group[1].await_verdict(0, {"node": 1}, 60, Patient())
    assert text is None and missing == [0] and time.monotonic() - started < 5
    group[1]._stop_beating.set()


def _hang_watch(timeout: float, peers: dict[int, PeerHang | None]) -> HangWatch:
    return HangWatch(
        clock=SystemClock(), progress=list, sample=lambda: None, sample_every=1.0,
        timeout=timeout, interval=1.0, auto=True, peers=lambda: peers,
    )  # fmt: skip


_said = st.one_of(
    st.none(),
    st.tuples(st.sampled_from([3.0, 10.0, 60.0, 300.0]), st.sampled_from([0.0, 2.0, 40.0, 400.0])),
)


@settings(max_examples=150, deadline=None)
@given(
    said=st.lists(_said, min_size=2, max_size=12),
    reader=st.integers(0, 11),
    own=st.sampled_from([3.0, 10.0, 300.0]),
    quiet=st.sampled_from([0.0, 20.0, 500.0]),
)
def test_a_digest_of_the_hang_watches_decides_as_all_of_them_would(
    said: list, reader: int, own: float, quiet: float
) -> None:
    """`--hang-timeout auto` on a node other than 0: its deadline and whether another
    node's ranks progress, from node 0's digest of at most six entries, are what every
    node's snapshot would have given."""
    nodes = len(said)
    reader %= nodes
    every = {
        n: None if v is None else PeerHang(deadline=v[0], quiet=v[1])
        for n, v in enumerate(said)
        if n != reader
    }
    entries = json.loads(json.dumps(digest(dict(enumerate(said)), nodes)))
    assert len(entries) <= 6
    some = {
        n: None if v is None else PeerHang(deadline=v[0], quiet=v[1])
        for n, v in read_digest(entries, reader).items()
    }
    for peers in (every, some):
        assert set(peers) <= set(every)
    full, cut = _hang_watch(300.0, every), _hang_watch(300.0, some)
    assert full._with_peers(fixed(own)) == cut._with_peers(fixed(own))
    for watch in (full, cut):
        watch.quiet, watch.deadline = quiet, watch._with_peers(fixed(own))
    assert full._peer_progresses() == cut._peer_progresses()


_items = st.builds(
    Item,
    source=st.sampled_from(list(Source)),
    tier=st.sampled_from(list(Tier)),
    ranks=st.lists(st.integers(0, 4096), max_size=4).map(tuple),
    says=st.text(max_size=40),
    location=st.none() | st.text(max_size=20),
    klass=st.none() | st.sampled_from(list(FailureClass)),
)


@st.composite
def _jobs(draw: st.DrawFn) -> JobVerdict:
    verdict = draw(
        st.none()
        | st.builds(
            Verdict,
            culprits=st.lists(st.integers(0, 64), max_size=3).map(tuple),
            decided_by=st.none() | _items,
            agreeing=st.lists(_items, max_size=job_json.ITEMS).map(tuple),
            disagreeing=st.lists(_items, max_size=job_json.ITEMS).map(tuple),
        )
    )
    culprits = verdict.culprits if verdict is not None else ()
    placed = {r: (r // 2, f"h{r // 2}") for r in culprits}
    return JobVerdict(
        status=draw(st.sampled_from(list(AttemptStatus))),
        code=draw(st.integers(0, 255)),
        lines=tuple(draw(st.lists(st.text(max_size=60), max_size=4))),
        lost=tuple(draw(st.lists(st.integers(0, 16), max_size=3))),
        root_node=draw(st.none() | st.integers(0, 16)),
        verdict=verdict,
        placed=draw(st.none() | st.just(placed)),
    )


@settings(max_examples=40, deadline=None)
@given(job=_jobs())
def test_the_published_verdict_reads_back_as_node_0_drew_it(job: JobVerdict) -> None:
    assert job_json.from_json(job_json.to_json(job)) == job


def test_the_published_verdict_is_bounded_and_a_foreign_one_is_refused() -> None:
    item = Item(source=Source.STACKS, tier=Tier.BEHIND, ranks=(1,), says="x")
    many = Verdict(culprits=(1,), decided_by=item, agreeing=(item,) * 500, disagreeing=())
    placed = {r: (r // 8, "h") for r in range(8192)}
    job = JobVerdict(
        status=AttemptStatus.HUNG, code=124, lines=("HUNG",), lost=(), verdict=many, placed=placed
    )
    text = job_json.to_json(job)
    assert len(text) < 5000
    back = job_json.from_json(text)
    assert back is not None and back.placed == {1: (0, "h")} and len(back.verdict.agreeing) == 16
    assert job_json.from_json('{"schema": "other"}') is None and job_json.from_json("[") is None
