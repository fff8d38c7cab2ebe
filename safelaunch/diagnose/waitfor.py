"""The wait-for graph of a stopped job, from the ranks' call ledgers (rundir/calls_file.py).

Rank r waits for rank p when r is blocked in a call that p has not yet made its side of:
- a collective, the k-th in group g: every member that has issued fewer than k
  collectives in g (a member with no ledger has issued none);
- a point-to-point call: its j-th receive from p (that group, that tag) waits for p
  when p has sent it fewer than j messages there; a send the same way round.
  A receive from any source waits for nobody in particular and draws no edge.

Then a cycle (ranks each waiting for the next) is a program deadlock, whoever is
"first"; and a sink, a rank others wait for that is not itself blocked in a call, is
where the job stopped: it computes, loads data, sleeps, or has left. A sink is named a
culprit only when the sinks are fewer than the ranks that wait for them directly: one
rank that issued an extra call waits for all the others, which are then all sinks, and
none of them is to blame. With as many sinks as waiters (1:1, two ranks) the graph alone cannot say
which side departed; the sinks are listed, the culprits left empty.

Pure: ledgers in, a frozen WaitFor out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from safelaunch.ranktext import ranks_label
from safelaunch.rundir.calls_file import Call, CallKind, CallLedger

SENDS = ("send", "isend")


@dataclass(frozen=True)
class Edge:
    waiter: int
    waited_on: int
    why: str  # one line of words, with the waiter's file:line where the ledger has it
    collective: bool = False  # the waiter waits in a collective (else in a send/recv)
    n: int = 0  # the waiter's call it waits in (its ledger's number)


@dataclass(frozen=True)
class Sink:
    rank: int
    waited_by: tuple[int, ...]  # every rank that waits for it, directly or through others
    why: str


@dataclass(frozen=True)
class WaitFor:
    edges: tuple[Edge, ...]
    cycles: tuple[tuple[int, ...], ...]  # each a program deadlock, its ranks ascending
    sinks: tuple[Sink, ...]
    culprits: tuple[int, ...]  # the sinks, when fewer than the ranks waiting for them directly
    findings: tuple[str, ...]  # one line of words each: cycles, then sinks


def wait_for(ledgers: Mapping[int, CallLedger], here: Collection[int] | None = None) -> WaitFor:
    """The wait-for graph of the ranks whose ledgers are given (a rank absent from
    `ledgers` but a member of a group counts as having issued nothing).

    `here`: the ranks whose ledgers this node would hold (None: every rank's). A rank run
    on another node has none here, which says nothing of it: it is never a sink (one
    node of a job must not name the others' ranks; the job verdict weighs their own)."""
    members = _members(ledgers.values())
    edges = [e for ledger in ledgers.values() for e in _edges(ledger, ledgers, members)]
    graph: dict[int, set[int]] = {}
    for edge in edges:
        graph.setdefault(edge.waiter, set()).add(edge.waited_on)
    cycles = _cycles(graph)
    blocked = {rank for rank, ledger in ledgers.items() if any(c.blocked for c in ledger.calls)}
    waited_on = {e.waited_on for e in edges}
    unseen = set() if here is None else waited_on - set(here) - set(ledgers)
    sinks = tuple(
        _sink(rank, _reaching(graph, rank), ledgers.get(rank))
        for rank in sorted(waited_on - blocked - unseen)
    )
    direct = {e.waiter for e in edges if e.waited_on in {s.rank for s in sinks}}
    culprits = tuple(s.rank for s in sinks) if 0 < len(sinks) < len(direct) else ()
    findings = [_cycle_line(cycle, edges) for cycle in cycles]
    findings += [sink.why for sink in sinks]
    return WaitFor(
        edges=tuple(sorted(edges, key=lambda e: (e.waiter, e.waited_on))),
        cycles=cycles,
        sinks=sinks,
        culprits=culprits,
        findings=tuple(findings),
    )


def _members(ledgers: Iterable[CallLedger]) -> dict[str, tuple[int, ...]]:
    """Each group's members, as the first ledger that recorded it says."""
    found: dict[str, tuple[int, ...]] = {}
    for ledger in ledgers:
        for group in ledger.groups:
            found.setdefault(group.name, group.ranks)
    return found


def _edges(
    ledger: CallLedger, ledgers: Mapping[int, CallLedger], members: Mapping[str, tuple[int, ...]]
) -> list[Edge]:
    edges = []
    for call in ledger.calls:
        if not call.blocked:
            continue
        if call.kind == CallKind.COLLECTIVE:
            edges += _collective_edges(ledger.rank, call, ledgers, members.get(call.group, ()))
        elif call.peer is not None and call.peer != ledger.rank:
            edge = _p2p_edge(ledger, call, ledgers.get(call.peer))
            if edge is not None:
                edges.append(edge)
    return edges


def _collective_edges(
    rank: int, call: Call, ledgers: Mapping[int, CallLedger], members: tuple[int, ...]
) -> list[Edge]:
    edges = []
    for member in members:
        if member == rank:
            continue
        issued = _issued(ledgers.get(member), call.group)
        if issued < (call.count or 0):
            so_far = "no ledger" if member not in ledgers else f"issued {issued} there"
            why = (
                f"rank {rank} waits in {call.shown()} (group {call.group}) for rank {member}, "
                f"which has {so_far}"
            )
            edges.append(Edge(waiter=rank, waited_on=member, why=why, collective=True, n=call.n))
    return edges


def _issued(ledger: CallLedger | None, group: str) -> int:
    """How many collectives a rank issued in a group (the count of its last one)."""
    if ledger is None:
        return 0
    counts = [c.count for c in ledger.calls if c.group == group and c.count is not None]
    return max(counts, default=0)


def _p2p_edge(ledger: CallLedger, call: Call, peer: CallLedger | None) -> Edge | None:
    """Its j-th message with the peer against the peer's matching calls so far."""
    if call.peer is None:  # an any-source receive waits for nobody in particular
        return None
    sending = call.op in SENDS
    nth = sum(1 for c in ledger.calls if c.n <= call.n and _pairs(call, c, ledger.rank, True))
    matched = 0 if peer is None else sum(1 for c in peer.calls if _pairs(call, c, ledger.rank))
    if matched >= nth:
        return None
    done = "sent it" if not sending else "posted receives from it for"
    so_far = "no ledger" if peer is None else f"{done} {matched} so far"
    why = (
        f"rank {ledger.rank} waits in {call.shown()} (message {nth}); rank {call.peer} has {so_far}"
    )
    return Edge(waiter=ledger.rank, waited_on=call.peer, why=why, n=call.n)


def _pairs(call: Call, other: Call, rank: int, own: bool = False) -> bool:
    """`other` is a p2p call on the same channel as `call` (group, tag): with `own`, one of
    the rank's own in the same direction to the same peer; else the peer's matching one
    (a send to the rank; a receive from it, or from any source)."""
    if other.kind != CallKind.P2P or other.group != call.group or other.tag != call.tag:
        return False
    sending = call.op in SENDS
    if own:
        return (other.op in SENDS) == sending and other.peer == call.peer
    if sending:
        return other.op not in SENDS and other.peer in (rank, None)
    return other.op in SENDS and other.peer == rank


def _reaching(graph: Mapping[int, set[int]], target: int) -> tuple[int, ...]:
    """Every rank with a path of waits to `target`."""
    reverse: dict[int, set[int]] = {}
    for waiter, targets in graph.items():
        for t in targets:
            reverse.setdefault(t, set()).add(waiter)
    seen: set[int] = set()
    todo = [target]
    while todo:
        for waiter in reverse.get(todo.pop(), ()):
            if waiter not in seen and waiter != target:
                seen.add(waiter)
                todo.append(waiter)
    return tuple(sorted(seen))


def _cycles(graph: Mapping[int, set[int]]) -> tuple[tuple[int, ...], ...]:
    """The strongly connected sets of two or more ranks (Tarjan's, without recursion)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(tuple(sorted(component)))
    return tuple(sorted(found))


def _cycle_line(cycle: tuple[int, ...], edges: Iterable[Edge]) -> str:
    inside = [e.why for e in edges if e.waiter in cycle and e.waited_on in cycle]
    return (
        f"program deadlock: {ranks_label(cycle)} wait for each other in a cycle, so none "
        f"can go on: {'; '.join(inside)}"
    )


def _sink(rank: int, waited_by: tuple[int, ...], ledger: CallLedger | None) -> Sink:
    if ledger is None:
        state = "has no ledger (it never reached torch.distributed, or its file is gone)"
    elif not ledger.calls:
        state = "has made no call yet"
    else:
        state = f"is in no call; its last was {ledger.calls[-1].shown()}"
    why = f"{ranks_label(waited_by)} wait for rank {rank}, which {state}"
    return Sink(rank=rank, waited_by=waited_by, why=why)
