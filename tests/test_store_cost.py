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
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safelaunch import exitcodes
from safelaunch.config import LaunchConfig
from safelaunch.diagnose import job_json
from safelaunch.diagnose.arbiter import Item, Source, Tier, Verdict
from safelaunch.diagnose.nodes import JobVerdict
from safelaunch.errors import RendezvousError
from safelaunch.hangs.rhythm import fixed
from safelaunch.outcome import AttemptStatus
from safelaunch.rendezvous import Placement, assign, roster, torchstore
from safelaunch.rendezvous.joining import _placed
from safelaunch.rendezvous.live_exchange import digest, read_digest
from safelaunch.rendezvous.liveness import Liveness, alive_key
from safelaunch.rendezvous.membership import Joined, Membership
from safelaunch.rendezvous.roster import Roster, exchange
from safelaunch.rendezvous.rounds import Round, my_record
from safelaunch.supervisor.watchers import HangWatch, PeerHang, SystemClock
from safelaunch.vocab import FailureClass


class Store:
    """One dict shared by every node; `ops` and `sent` count each node's operations and the
    bytes of their keys and values."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.lock = threading.Condition()
        self.ops: Counter[int] = Counter()
        self.sent: Counter[int] = Counter()
        self.gone = False  # the store's host ended: every operation fails

    def client(self, node: int) -> Client:
        return Client(self, node)


class Client:
    def __init__(self, store: Store, node: int) -> None:
        self._s, self._node = store, node

    def _count(self, *sizes: int) -> None:
        if self._s.gone:
            raise ConnectionError("Connection was likely closed")
        self._s.ops[self._node] += 1
        self._s.sent[self._node] += sum(sizes)

    def set(self, key: str, value: str) -> None:
        self._count(len(key), len(value))
        with self._s.lock:
            self._s.data[key] = value.encode()
            self._s.lock.notify_all()

    def get(self, key: str) -> bytes:
        with self._s.lock:
            value = self._s.data[key]
        self._count(len(key), len(value))
        return value

    def multi_get(self, keys: list[str]) -> list[bytes]:
        with self._s.lock:
            values = [self._s.data[key] for key in keys]
        self._count(*map(len, keys), *map(len, values))
        return values

    def wait(self, keys: list[str], seconds: float) -> bool:
        """As TCPStore's: the store wakes the waiter when the keys are there."""
        self._count(*map(len, keys))
        with self._s.lock:
            return (
                self._s.lock.wait_for(
                    lambda: self._s.gone or all(k in self._s.data for k in keys), seconds
                )
                and not self._s.gone
            )

    def add(self, key: str, amount: int) -> int:
        self._count(len(key), 8)
        with self._s.lock:
            value = int(self._s.data.get(key, b"0")) + amount
            self._s.data[key] = str(value).encode()
            self._s.lock.notify_all()
            return value

    def check(self, keys: list[str]) -> bool:
        self._count(*map(len, keys))
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
        m.stop_beating()


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
    group[1].stop_beating()


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


# --- the join: node 0 reads every record, the others one roster (rendezvous/roster.py) ---


def _facts(node: int, nccl: str = "2.27.3") -> dict[str, Any]:
    return {"host": f"host-{node:05d}.example", "nproc": 8, "torch": "2.13.0", "nccl": nccl}


def _exchange_all(
    store: Store, records: list[dict[str, Any]], before: Round | None = None
) -> list[Roster]:
    """Every node's exchange on its own thread, as N launchers would: their rosters."""
    nodes = len(records)
    found: dict[int, Roster] = {}

    def one(node: int) -> None:
        hosts = before.hosts if before and records[node].get("before") else ()
        found[node] = exchange(
            store.client(node), node, nodes, records[node], 30, hosts_before=hosts
        )

    threads = [threading.Thread(target=one, args=(n,)) for n in range(nodes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return [found[n] for n in range(nodes)]


def _previous(nodes: int) -> Round:
    hosts = tuple(_facts(n)["host"] for n in range(nodes))
    return Round(
        attempt=2, restart_count=1, token="t-old", hosts=hosts, nodes_before=0, left=(),
        left_hosts=(), joined=(),
    )  # fmt: skip


@pytest.mark.parametrize("elastic", [False, True])
def test_the_join_asks_the_same_few_operations_of_every_node_but_node_0(
    elastic: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 4, 16 and 64 nodes: every node but node 0 writes its record, counts itself in,
    waits (the store wakes it) and reads one roster, whatever the job's size; node 0 reads
    every record in one round trip. Before, every node read every node's record (N^2).
    The bytes: each record is the same size at any N; the roster, compressed, grows with
    the hosts it names (every node needs them), node 0's reads with the records."""
    monkeypatch.setattr(roster, "WAIT_SLICE", 60.0)  # no timed-out wait: counts, not timing
    others, first, sent = {}, {}, {}
    for nodes in (4, 16, 64):
        store = Store()
        before = _previous(nodes) if elastic else None
        records = [{**_facts(n), **my_record(3, 1, before, n)} for n in range(nodes)]
        rosters = _exchange_all(store, records, before)
        assert all(r == rosters[0] for r in rosters) and not rosters[0].problems
        assert rosters[0].hosts == tuple(r["host"] for r in records)
        assert [assign(n, rosters[n].nprocs) for n in (0, nodes - 1)] == [
            (0, 8 * nodes),
            (8 * (nodes - 1), 8 * nodes),
        ]
        change = rosters[0].round
        assert change.first is not elastic and not change.left and not change.joined
        others[nodes] = max(store.ops[n] for n in range(1, nodes))
        first[nodes] = store.ops[0]
        sent[nodes] = (store.sent[0], max(store.sent[n] for n in range(1, nodes)))
    # record, count, (the last one in: "all"), wait, roster; elastic: the old hosts, once
    assert max(others.values()) <= (7 if elastic else 5), others  # the same bound at any N
    assert max(first.values()) <= 8, first  # record, count, wait, every record at once, roster
    assert sent[64][0] <= 400 * 64, sent  # node 0: every record, ~300 bytes each
    assert sent[64][1] <= 800 + 16 * 64, sent  # another: its record, the compressed roster


@pytest.fixture
def workers_store(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Node 0's workers' store without torch: the attempts it was served for."""
    served: list[int] = []

    def serve(addr: str) -> tuple[object, int]:
        served.append(len(served))
        return object(), 40000 + len(served)

    monkeypatch.setattr(torchstore, "serve_workers_store", serve)
    return served


def _config(**conf: str) -> LaunchConfig:
    return LaunchConfig(
        training_script="train.py",
        rdzv_conf=MappingProxyType(
            {"keep_alive_interval": "0.2", "keep_alive_max_attempt": "2", **conf}
        ),
    )


def _join_all(
    store: Store, nodes: int, config: LaunchConfig, facts: Any = _facts, skip: tuple[int, ...] = ()
) -> dict[int, Membership | BaseException]:
    """_placed on every node but `skip` (each on its thread): its membership or its error."""
    found: dict[int, Membership | BaseException] = {}

    def one(node: int) -> None:
        joined = Joined(node=node, nodes=nodes, master_addr="a", master_port=1, shutdown=lambda: 0)
        record = {**facts(node), **my_record(0, 0, None, 0)}
        host, nproc = record.pop("host"), record.pop("nproc")
        try:
            found[node] = _placed(config, joined, store.client(node), nproc, record, host)
        except BaseException as exc:
            found[node] = exc

    threads = [threading.Thread(target=one, args=(n,)) for n in range(nodes) if n not in skip]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    for result in found.values():
        if isinstance(result, Membership):
            result.stop_beating()
    return found


def _said(found: dict[int, Membership | BaseException]) -> set[str]:
    return {str(e) if isinstance(e, RendezvousError) else repr(e) for e in found.values()}


def test_every_node_is_placed_from_node_0s_roster_as_torchrun_places_it(
    workers_store: list[int],
) -> None:
    found = _join_all(Store(), 5, _config())
    places = [m.placement for m in found.values() if isinstance(m, Membership)]
    assert [(p.node, p.base_rank, p.world_size) for p in sorted(places, key=lambda p: p.node)] == [
        (n, 8 * n, 40) for n in range(5)
    ]
    assert {p.hosts for p in places} == {tuple(_facts(n)["host"] for n in range(5))}
    # the first attempt: every node met in the exchange (no second barrier), and node 0
    # served the workers' store before the roster: every node finds its port at once
    members = [m for m in found.values() if isinstance(m, Membership)]
    assert [m.start_attempt(0, True, 0.1) for m in members] == [([], [])] * 5
    assert {m.placement_for(0, 0.1).master_port for m in members} == {40001}
    assert workers_store == [0]


def test_facts_that_differ_stop_every_node_with_the_same_lines(workers_store: list[int]) -> None:
    found = _join_all(Store(), 4, _config(), lambda n: _facts(n, "2.21.5" if n == 2 else "2.27.3"))
    said = _said(found)
    assert len(said) == 1 and "NCCL differs between nodes: 2.27.3 on node 0" in said.pop()
    assert {e.exit_code for e in found.values() if isinstance(e, RendezvousError)} == {
        exitcodes.PREFLIGHT
    }


def test_a_node_that_never_reports_is_named_by_every_node_at_the_join_timeout(
    workers_store: list[int],
) -> None:
    started = time.monotonic()
    found = _join_all(Store(), 4, _config(join_timeout="1"), skip=(2,))
    assert _said(found) == {"node(s) 2 never reported after the rendezvous (1 s)"}
    assert len(found) == 3 and time.monotonic() - started < 15


def test_a_node_0_gone_mid_exchange_is_found_lost_long_before_the_join_timeout(
    workers_store: list[int],
) -> None:
    """Node 0 wrote its record and beat, then its launcher died: the others stop within
    the keep-alive bound (0.4 s here), not at the join timeout (600 s)."""
    store = Store()
    node0 = store.client(0)
    node0.add(alive_key(0), 1)
    node0.set("join/0", json.dumps(_facts(0)))
    started = time.monotonic()
    found = _join_all(store, 3, _config(join_timeout="600"), skip=(0,))
    assert _said(found) == {
        "node 0 (host-00000.example) stopped in the round's exchange: its launcher gave no "
        "sign of life (it died, or the network failed)"
    }
    assert time.monotonic() - started < 30


def test_the_stores_host_gone_mid_exchange_is_said_as_such(workers_store: list[int]) -> None:
    store = Store()
    threading.Timer(0.5, lambda: setattr(store, "gone", True)).start()
    found = _join_all(store, 3, _config(), skip=(0,))  # the others wait for node 0
    assert len(found) == 2
    for error in found.values():
        assert str(error).startswith(
            "lost contact with the rendezvous store in the round's exchange (ConnectionError"
        ), error


def test_a_node_0_that_was_not_in_the_last_round_names_the_nodes_that_left() -> None:
    """torch numbers a round's nodes by their descriptors: a node that joins late may be
    node 0. It reads the previous round's hosts that a node of that round wrote."""
    before = _previous(3)  # hosts of nodes 0, 1, 2; node 1 is gone
    records = [
        _facts(9),  # new, node 0 of this round
        {**_facts(0), **my_record(4, 2, before, 0)},
        {**_facts(2), **my_record(4, 2, before, 2)},
    ]
    rosters = _exchange_all(Store(), records, before)
    change = rosters[0].round
    assert all(r == rosters[0] for r in rosters)
    assert (change.attempt, change.restart_count, change.nodes_before) == (4, 2, 3)
    assert change.left_names() == ["node 1 (host-00001.example)"] and change.joined == (0,)


def _exchange_views(views: list[tuple[int, int]], timeout: float) -> list[Roster | Exception]:
    """Each launcher's exchange as torch placed it, (node, nodes), on its own thread."""
    store, found = Store(), {}

    def one(launcher: int) -> None:
        node, nodes = views[launcher]
        try:
            found[launcher] = exchange(
                store.client(launcher), node, nodes, _facts(launcher), timeout
            )
        except Exception as exc:
            found[launcher] = exc

    threads = [threading.Thread(target=one, args=(n,)) for n in range(len(views))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return [found[n] for n in range(len(views))]


def test_torch_giving_the_nodes_different_rounds_ends_in_an_error_not_a_hang() -> None:
    """Under load torch's keep-alive may drop a node while its round closes, one node
    seeing that and another not (seen at 2 s keep-alives, load ~20): a node whose round
    is not node 0's says so; none waits past the join timeout, none is placed wrongly."""
    started = time.monotonic()
    alone, bigger = _exchange_views([(0, 1), (1, 2)], timeout=3)  # node 0 saw node 1 dropped
    assert isinstance(alone, Roster) and len(alone.hosts) == 1  # what torch told node 0
    assert (
        str(bigger)
        == "torch's rendezvous gave this node (node 1) a round of 2 node(s) and node 0 one of 1"
    )
    first, second = _exchange_views([(0, 2), (0, 1)], timeout=3)  # both were told node 0
    said = [r.split for r in (first, second) if isinstance(r, Roster) and r.split]
    assert said and said[0][0].startswith("torch's rendezvous "), said  # whoever wrote last
    assert time.monotonic() - started < 20
