"""The round's roster: every node's record to node 0, one compact answer back. O(N) in all.

After torch's rendezvous each node writes its record (host, ranks, versions, where it
stood in the previous round: a few hundred bytes) and counts itself in; the node that
completes the count says so in one key. Node 0 of the round waits for that key, reads
every record in one round trip (`multi_get`, as torch's agent does in
`_assign_worker_ranks`), compares the facts, draws the round (rounds.py) and publishes
one answer: hosts and local world sizes per node, the round's change, and what failed,
zlib-compressed (~3 KB at 1,024 nodes with regular host names; every node needs the
hosts to name nodes and place culprits). Every other node asks a constant number of
operations: its record, the count, its wait (the store wakes it: TCPStore's `wait`),
one read. Before, every node read every node's record: N^2 reads.

A node 0 that dies after its record is found by its liveness counter (the beat starts
before the exchange): the others do not wait for the join timeout. Past that timeout a
node names who never reported, as node 0 does, whoever's deadline comes first.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from safelaunch.errors import RendezvousError
from safelaunch.rendezvous import fact_mismatches
from safelaunch.rendezvous.keyvalue import KeyValue
from safelaunch.rendezvous.liveness import WATCHER
from safelaunch.rendezvous.membership import NAMED
from safelaunch.rendezvous.rounds import Round, before_of, new_token, round_of

WAIT_SLICE = 0.5  # seconds of one wait in the store; between two, node 0's liveness is looked at
PREFIX = "join"


@dataclass(frozen=True, slots=True, kw_only=True)
class Roster:
    """What node 0 publishes for the round: the same on every node."""

    hosts: tuple[str, ...]
    nprocs: tuple[int, ...]  # local world size per node
    round: Round
    problems: tuple[str, ...] = ()  # facts that differ between nodes: every node stops
    missing: tuple[int, ...] = ()  # nodes that never reported: every node stops
    split: tuple[str, ...] = ()  # torch gave the nodes different rounds: every node stops


def _key(what: str | int) -> str:
    return f"{PREFIX}/{what}"


def pack(value: Any) -> str:
    """JSON, compressed, as text (the store's values are text here)."""
    return base64.b64encode(zlib.compress(json.dumps(value).encode(), 6)).decode()


def unpack(text: str | bytes) -> Any:
    return json.loads(zlib.decompress(base64.b64decode(text)))


def exchange(
    store: KeyValue,
    node: int,
    nodes: int,
    mine: Mapping[str, Any],
    timeout: float,
    *,
    hosts_before: Sequence[str] = (),
    watcher_lost: Callable[[], bool] = lambda: False,
    prepare: Callable[[int], None] = lambda attempt: None,
) -> Roster:
    """This node's record out; the round's roster back (node 0 draws it).

    `hosts_before`: the hosts of the round this node comes from (elastic), for node 0 to
    name the nodes that left; `watcher_lost`: whether node 0's launcher stopped beating;
    `prepare`: node 0's work for the round's first attempt (its number) before the others
    read the roster (the workers' store: they find its port at once).
    Raises RendezvousError when node 0 gives no roster (lost, or silent past `timeout`);
    the store's own errors (its host gone) pass through.
    """
    started = time.monotonic()
    me = uuid.uuid4().hex[:8]  # which record is this node's (torch may give two the same rank)
    mine = {**mine, "node": node, "nodes": nodes, "me": me}
    store.set(_key(node), json.dumps(mine))
    before = before_of(mine)
    if before is not None and hosts_before:  # for a node 0 new to the job: the old hosts
        key = _key(f"before/{before[0]}")
        if not store.check([key]):  # two nodes may both write: the same value
            store.set(key, pack(list(hosts_before)))
    if store.add(_key("arrived"), 1) >= nodes:  # >=: a node that was given a smaller round
        store.set(_key("all"), "1")
    if node == WATCHER:
        return _judge(store, nodes, mine, timeout, started, hosts_before, prepare)
    roster = _wait(store, nodes, timeout, started, watcher_lost)
    if not (roster.missing or roster.problems or roster.split) and len(roster.hosts) != nodes:
        raise RendezvousError(
            f"torch's rendezvous gave this node (node {node}) a round of {nodes} node(s) and "
            f"node 0 one of {len(roster.hosts)}",
            SPLIT_FIX,
        )
    return roster


def _judge(
    store: KeyValue,
    nodes: int,
    mine: Mapping[str, Any],
    timeout: float,
    started: float,
    hosts_before: Sequence[str],
    prepare: Callable[[int], None],
) -> Roster:
    """Node 0: every record at once, compared; the roster published."""
    keys = [_key(n) for n in range(nodes)]
    while not (store.wait([_key("all")], WAIT_SLICE) and store.check(keys)):
        if store.check([_key("all")]):  # set by a node given a smaller round: wait for the rest
            time.sleep(WAIT_SLICE / 5)
        published = store.check([_key("roster")])  # by another node told it is node 0
        if time.monotonic() - started > timeout or published:
            missing = _missing(store, nodes)
            if missing or published:
                found = replace(_never_reported(missing), split=_two_judges(store, mine))
                if not published:
                    store.set(_key("roster"), pack(_record(found)))
                return found
            break  # every record is there (a node died between its record and the count)
    records = [json.loads(value) for value in store.multi_get(keys)]
    old = next((p for r in records if (p := before_of(r)) is not None), None)
    previous: Sequence[str] = ()
    if old is not None and (before_of(mine) or ("",))[0] == old[0]:
        previous = hosts_before  # node 0 was in that round
    elif old is not None:  # it was not: a node that was wrote the round's hosts
        key = _key(f"before/{old[0]}")
        previous = unpack(store.get(key)) if store.check([key]) else ()
    roster = Roster(
        hosts=tuple(str(r.get("host", "?")) for r in records),
        nprocs=tuple(int(r.get("nproc", 0)) for r in records),
        round=round_of(records, new_token(), previous),
        problems=tuple(fact_mismatches(records)),
        split=_split(records, nodes, str(mine["me"])),
    )
    if not (roster.problems or roster.split):
        prepare(roster.round.attempt)
    store.set(_key("roster"), pack(_record(roster)))
    return roster


def _wait(
    store: KeyValue, nodes: int, timeout: float, started: float, watcher_lost: Callable[[], bool]
) -> Roster:
    """Every other node: node 0's roster, or why there is none."""
    seen_watcher = False  # node 0 is judged lost only once it wrote its record (it beats then)
    while not store.wait([_key("roster")], WAIT_SLICE):
        seen_watcher = seen_watcher or store.check([_key(WATCHER)])
        if seen_watcher and watcher_lost():
            raise RendezvousError(
                f"node 0 ({_host_of(store, WATCHER)}) stopped in the round's exchange: its "
                "launcher gave no sign of life (it died, or the network failed)",
                "see node 0's console; start the job again",
            )
        if time.monotonic() - started > timeout:
            missing = _missing(store, nodes)
            if missing:  # what node 0 publishes at its own deadline
                return _never_reported(missing)
            raise RendezvousError(
                f"node 0 ({_host_of(store, WATCHER)}) published no placement for the round "
                f"within {timeout:g} s, though every node reported",
                "see node 0's console",
            )
    text = store.get(_key("roster"))
    try:
        return _roster(unpack(text))
    except (ValueError, KeyError, TypeError, zlib.error):  # binascii.Error is a ValueError
        raise RendezvousError(
            "node 0 published a placement this node cannot read",
            "run the same safelaunch version on every node",
        ) from None


SPLIT_FIX = (
    "torch's keep-alive found a node late while the round closed (a loaded machine, or a "
    "short keep_alive_interval): start the job again"
)


def _split(records: Sequence[Mapping[str, Any]], nodes: int, me: str) -> tuple[str, ...]:
    """Where torch's rendezvous gave the nodes different rounds (its keep-alive dropped a
    node while the round closed, one node seeing it and another not): one line, or none."""
    said = [
        f"node {n} ({r.get('host', '?')}) was given node {r.get('node')} of {r.get('nodes')}"
        for n, r in enumerate(records)
        if r.get("nodes") != nodes or r.get("node") != n or (n == WATCHER and r.get("me") != me)
    ]
    if not said:
        return ()
    return (
        f"torch's rendezvous gave the nodes different rounds: node 0 was given {nodes} "
        f"node(s); the record of {'; '.join(said[:NAMED])}",
    )


def _two_judges(store: KeyValue, mine: Mapping[str, Any]) -> tuple[str, ...]:
    """Past the timeout: another launcher was told it is node 0 too (it wrote over this
    one's record, or published a roster already); one line, or none."""
    other = json.loads(store.get(_key(WATCHER)))
    if other.get("me") != mine["me"]:
        who = f"{other.get('host', '?')} (of {other.get('nodes')})"
    elif store.check([_key("roster")]):
        who = "another launcher, which published the round's roster"
    else:
        return ()
    return (
        f"torch's rendezvous told two nodes they are node 0 of the round: this one "
        f"({mine.get('host', '?')}, of {mine['nodes']} node(s)) and {who}",
    )


def _never_reported(missing: tuple[int, ...]) -> Roster:
    return Roster(hosts=(), nprocs=(), round=round_of([], "", ()), missing=missing)


def _missing(store: KeyValue, nodes: int) -> tuple[int, ...]:
    """The nodes whose record is not there (after the timeout only: one check a node)."""
    return tuple(n for n in range(nodes) if not store.check([_key(n)]))


def _host_of(store: KeyValue, node: int) -> str:
    try:
        return str(json.loads(store.get(_key(node)))["host"])
    except Exception:
        return "?"


def _record(roster: Roster) -> dict[str, Any]:
    change = roster.round
    return {
        "hosts": list(roster.hosts),
        "nprocs": list(roster.nprocs),
        "problems": list(roster.problems),
        "missing": list(roster.missing),
        "split": list(roster.split),
        "round": {
            "attempt": change.attempt,
            "restart_count": change.restart_count,
            "token": change.token,
            "nodes_before": change.nodes_before,
            "left": list(change.left),
            "left_hosts": list(change.left_hosts),
            "joined": list(change.joined),
        },
    }


def _roster(record: Mapping[str, Any]) -> Roster:
    hosts = tuple(str(h) for h in record["hosts"])
    said = record["round"]
    return Roster(
        hosts=hosts,
        nprocs=tuple(int(n) for n in record["nprocs"]),
        problems=tuple(str(p) for p in record["problems"]),
        missing=tuple(int(n) for n in record["missing"]),
        split=tuple(str(line) for line in record.get("split", ())),
        round=Round(
            attempt=int(said["attempt"]),
            restart_count=int(said["restart_count"]),
            token=str(said["token"]),
            hosts=hosts,
            nodes_before=int(said["nodes_before"]),
            left=tuple(int(n) for n in said["left"]),
            left_hosts=tuple(str(h) for h in said["left_hosts"]),
            joined=tuple(int(n) for n in said["joined"]),
        ),
    )
