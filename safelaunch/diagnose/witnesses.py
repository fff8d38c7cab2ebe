"""The evidence the arbiter weighs, read from what the diagnosis already collected.

One function per source, each turning its own findings into arbiter Items: the root-cause
rule's first real failure, the flight records' divergences (by majority, here: the
comparison itself names whoever differs from the lowest rank), the hang's stacks and the
survivors' (taken before teardown), error texts that name a rank, Gloo's peer addresses,
and the ranks' call ledgers with their wait-for graph.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path

from safelaunch.diagnose.arbiter import Item, Source, Tier
from safelaunch.diagnose.leaving import EXIT_CALLS, Leave, exit_call
from safelaunch.diagnose.match import matches
from safelaunch.diagnose.rootcause import WAITING, RootCause
from safelaunch.diagnose.signatures import CONSEQUENCES
from safelaunch.flights.forensics import Divergence, DivergenceKind, Forensics, WaitKind
from safelaunch.hangs.analysis import HangAnalysis, Whereabouts, loading_data
from safelaunch.ranktext import ranks_label
from safelaunch.vocab import COMMUNICATION, DATA, FailureClass


def first_failure(found: RootCause) -> Item:
    """The root-cause rule's rank: an error of its own, or only the first to fail."""
    sig = found.signature
    where = found.error.location if found.error else None
    what = found.error.line if found.error else f"it failed first ({found.klass})"
    if found.left_early:
        return Item(
            source=Source.EXIT_RECORD,
            tier=Tier.OWN_ERROR,
            ranks=(found.rank,),
            says=f"rank {found.rank} left while the others still communicated",
            location=where,
            klass=found.klass,
        )
    waited = sig is not None and sig.id in WAITING
    # a consequence's text with no signature of its own ("Connection reset by peer" read
    # as a RuntimeError) only followed a peer too
    only_followed = (sig is not None and sig.consequence) or (
        found.error is not None and bool(matches(found.error.line, None, CONSEQUENCES))
    )
    weak = waited or only_followed
    return Item(
        source=Source.FIRST_FAILURE,
        tier=Tier.FIRST_FAILURE if weak else Tier.OWN_ERROR,
        ranks=(found.rank,),
        says=f"rank {found.rank} failed first: {shorten(what)}"
        if weak
        else f"rank {found.rank}'s own error: {shorten(what)}",
        location=where,
        klass=found.klass,
    )


def shorten(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def minority(calls: Mapping[int, str]) -> tuple[tuple[int, ...], str] | None:
    """The ranks whose call differs from the one a strict plurality made, and that call;
    None when all agree or the two commonest tie (one against one: no rank is odd)."""
    counts = Counter(calls.values())
    if len(counts) < 2:
        return None
    (common, most), (_, second) = counts.most_common(2)
    if most == second:
        return None
    return tuple(sorted(r for r, c in calls.items() if c != common)), common


def one(places: Iterable[str | None]) -> str | None:
    """The place where there is exactly one (ranks at several places have none)."""
    found = set(places)
    return found.pop() if len(found) == 1 else None


def _majority_odd(d: Divergence) -> tuple[tuple[int, ...], str] | None:
    """The members whose call differs from the one most members made; None without a
    strict majority (two ranks that disagree: the comparison cannot say which is odd)."""
    differ = dict(d.differ)
    present = [r for r in d.ranks if r not in d.missing and r not in d.no_record]
    calls = {r: differ.get(r, d.call) for r in present}
    found = minority(calls)
    if found is None:
        return None
    odd, common = found
    said = "; ".join(f"rank {r} called {calls[r]}" for r in odd)
    return odd, f"at collective #{d.seq} of group [{_members(d)}] {said}, the others {common}"


def _members(d: Divergence) -> str:
    return ",".join(map(str, d.ranks))


def flight_items(
    forensics: Forensics | None, waiting: Iterable[int] = (), ledgered: Iterable[int] = ()
) -> list[Item]:
    """Divergences: a different call is content; a member that never called it, behind.

    `waiting`: ranks seen waiting inside a collective (stacks, heartbeats). A member that
    never called a subgroup's collective because it waits in another one is blocked there,
    not the cause: that finding is last-resort evidence only (the wait-for graph and the
    stacks say whom it waits for). `ledgered`: ranks with a call ledger: a pair of them
    that both receive (or send) is the wait-for graph's to judge, which reads the same
    calls with each rank's own loop (a stage that skipped its send leaves its peer and
    itself both receiving: the pair alone would blame both).
    """
    if forensics is None:
        return []
    blocked = set(waiting)
    items: list[Item] = []
    for d in forensics.divergences:
        if d.kind == DivergenceKind.MISMATCH:
            odd = _majority_odd(d)
            if odd is not None:
                ranks, says = odd
                items.append(
                    Item(
                        source=Source.FLIGHT_RECORD,
                        tier=Tier.CONTENT,
                        ranks=ranks,
                        says=says,
                        klass=COMMUNICATION,
                    )
                )
        elif d.kind == DivergenceKind.MISSING and d.missing:
            elsewhere = set(d.missing) <= blocked
            items.append(
                Item(
                    source=Source.FLIGHT_RECORD,
                    tier=Tier.FIRST_FAILURE if elsewhere else Tier.BEHIND,
                    ranks=d.missing,
                    says=f"{ranks_label(d.missing)} never called collective #{d.seq} {d.call} "
                    f"of group [{_members(d)}], which the others called"
                    + ("; it waits in another collective" if elsewhere else ""),
                )
            )
    known = set(ledgered)
    for w in forensics.p2p:
        if w.kind == WaitKind.UNANSWERED:
            continue  # who should answer is a guess from the pairing alone
        if set(w.ranks) <= known:
            continue
        calls = "; ".join(f"rank {r} {c}" for r, c in w.calls)
        items.append(
            Item(
                source=Source.FLIGHT_RECORD,
                tier=Tier.CONTENT,
                ranks=tuple(sorted(w.ranks)),
                says=f"p2p deadlock ({w.kind}): {calls}",
                klass=COMMUNICATION,
            )
        )
    return items


def hang_items(hang: HangAnalysis | None, threads: Mapping[int, str] | None = None) -> list[Item]:
    """The hang's odd ones out, from where every rank's stack was; a rank whose script
    ended is placed where its lingering thread is (`threads`: leaving.thread_places)."""
    if hang is None or not hang.culprits:
        return []
    ended = all(any(r in g.ranks and g.ended for g in hang.groups) for r in hang.culprits)
    place = (one((threads or {}).get(r) for r in hang.culprits) if ended else None) or next(
        (g.location for g in hang.groups if set(g.ranks) <= set(hang.culprits) and g.location),
        None,
    )
    return [
        Item(
            source=Source.STACKS,
            tier=Tier.BEHIND,
            ranks=hang.culprits,
            says=f"{ranks_label(hang.culprits)}: {hang.reason}",
            location=place,
        )
    ]


def exit_items(hang: HangAnalysis | None, leaves: Mapping[int, Leave]) -> list[Item]:
    """A hang whose culprits include ranks that ended: where and how each left, from its
    exit record (a failure's first failure says it already: witnesses.first_failure).
    A clean end (code 0, the script's end) is data/sampling, as a failure's rank that left
    early (its loop ended first: its data ran out); a code of its own is no class."""
    if hang is None:
        return []
    items = []
    for rank, _ in hang.exited:
        leave = leaves.get(rank)
        if leave is None or rank not in hang.culprits:
            continue
        how = exit_call(leave) if leave.how in EXIT_CALLS else str(leave.how or "ended")
        items.append(
            Item(
                source=Source.EXIT_RECORD,
                tier=Tier.OWN_ERROR,
                ranks=(rank,),
                says=f"rank {rank} left ({how}) while the others still communicated",
                location=leave.location,
                klass=DATA if leave.code in (0, None) else None,
            )
        )
    return items


_BARRIER = re.compile(r"Ranks? ([\d, ]+?) failed to pass monitoredBarrier")
_DDP = re.compile(r"while rank (\d+) has inconsistent")
_DETAIL = re.compile(r"Rank (\d+) is running collective: (CollectiveFingerPrint\([^)]*\))")


def error_text_items(
    texts: Mapping[int, str],
    world: Iterable[int],
    groups: Mapping[int, Sequence[int]] | None = None,
) -> list[Item]:
    """Ranks that torch's own error texts name, in any rank's log.

    DETAIL's mismatch text names two ranks and their calls on each rank that raised it;
    the calls are counted over all of them, and only a strict minority is blamed. Its
    ranks are those of the group the collective ran in, the raising rank first: `groups`
    (a rank's last collective's group members, from its call ledger; else the world) maps
    them to global ranks, and a text whose first rank is not the raising rank's place in
    that group is not read (it is another group's: a guess would blame an innocent rank).
    Without `groups` (explain over logs), one such text means the texts are a subgroup's:
    none is read.
    """
    world = sorted(set(world))
    items: list[Item] = []
    barrier: set[int] = set()
    ddp: set[int] = set()
    calls: dict[int, str] = {}
    foreign = False  # a DETAIL text that is not in its group's numbering
    for rank, text in texts.items():
        for m in _BARRIER.finditer(text):
            barrier.update(int(r) for r in re.findall(r"\d+", m[1]))
        ddp.update(int(m[1]) for m in _DDP.finditer(text))
        members = list((groups or {}).get(rank) or world)
        found = list(_DETAIL.finditer(text))
        if not found:
            continue
        if rank not in members or int(found[0][1]) != members.index(rank):
            foreign = True
            continue
        for m in found:
            local = int(m[1])
            if local < len(members):
                calls.setdefault(members[local], m[2])
    if foreign and groups is None:
        calls = {}
    if barrier and barrier <= set(world):
        ranks = tuple(sorted(barrier))
        items.append(
            Item(
                source=Source.ERROR_TEXT,
                tier=Tier.BEHIND,
                ranks=ranks,
                says=f"torch: {ranks_label(ranks)} failed to pass monitoredBarrier",
            )
        )
    if ddp and ddp <= set(world):
        ranks = tuple(sorted(ddp))
        items.append(
            Item(
                source=Source.ERROR_TEXT,
                tier=Tier.CONTENT,
                ranks=ranks,
                says=f"torch: {ranks_label(ranks)} built an inconsistent DDP model",
                klass=FailureClass.MODEL,
            )
        )
    items.extend(_detail_items(calls))
    return items


def _detail_items(calls: Mapping[int, str]) -> list[Item]:
    found = minority(calls)
    if found is None:
        return []
    odd, _ = found
    return [
        Item(
            source=Source.ERROR_TEXT,
            tier=Tier.CONTENT,
            ranks=odd,
            says=f"torch DETAIL: {ranks_label(odd)} ran another collective than "
            f"{ranks_label(sorted(set(calls) - set(odd)))}",
            klass=COMMUNICATION,
        )
    ]


def survivor_items(
    survivors: Sequence[Whereabouts],
    first: Item | None,
    threads: Mapping[int, str] | None = None,
    failed_inside: Collection[int] = (),
) -> list[Item]:
    """Where the other ranks were when the first one failed (taken before the teardown):
    a rank not in the collective the others wait in is the one they waited for.

    Only where the first failure only waited (a timeout) or followed a peer: beside an
    error of a rank's own, a survivor busy elsewhere is a healthy straggler, not evidence.
    `failed_inside`: failed ranks that stopped inside a call (their ledgers: a timeout, a
    mismatch): they waited too (a pipeline's waiting stages often all time out before
    the snapshot is taken).
    """
    if first is not None and first.tier != Tier.FIRST_FAILURE:
        return []
    waiting = [g for g in survivors if g.waiting]
    waiters = sum(len(g.ranks) for g in waiting) + len(set(failed_inside))
    elsewhere = [g for g in survivors if not g.waiting and (g.frames or g.ended)]
    if not waiters or not elsewhere:
        return []
    ranks = tuple(sorted(r for g in elsewhere for r in g.ranks))
    if len(ranks) >= waiters:
        return []  # most were elsewhere: nothing singles them out
    what = "; ".join(
        f"{ranks_label(g.ranks)} in {g.activity}" + (f" ({g.ended})" if g.ended else "")
        for g in elsewhere
    )
    busy = [g for g in elsewhere if not g.ended]  # a script that ended is no place of work
    return [
        Item(
            source=Source.STACKS,
            tier=Tier.BEHIND,
            ranks=ranks,
            says=f"when the first rank failed, {what}, not in the collective the others waited in",
            # loading data is the class; elsewhere in its own code, the timeout's stays (a
            # stop-the-world pause past it: communication, the group timeout to raise)
            klass=DATA
            if busy and len(busy) == len(elsewhere) and all(map(loading_data, busy))
            else None,
            location=one(
                (threads or {}).get(r) if g.ended else g.location
                for g in elsewhere
                for r in g.ranks
            ),
        )
    ]


# Gloo names the peer it lost as "Connection closed by peer [host]:port", or "Read error
# [host]:port: Connection reset by peer" (seen at 4 nodes, a node killed), or a write error
_PEER = re.compile(r"(?:Connection closed by peer|Read error|Write error) \[([^\]]+)\]:(\d+)")


def peer_address_items(texts: Mapping[int, str], attempt_dir: Path) -> list[Item]:
    """Gloo's "Connection closed by peer [host]:port" mapped back to the rank that owned
    the socket (comm_file.rank_of_address): where every such text leads to one rank, that
    rank's process went first.

    A named rank whose own text is such a closed connection went as a consequence too: its
    text is followed in turn, and a chain that leaves the ranks recorded here (a peer on
    another node) or loops names nobody. Seen at 4 nodes on one host: a node's rank 2 and
    rank 3 both lost their peer on a node that was killed, and one port rank 3 also held
    named it as the one that went first.
    """
    from safelaunch.rundir.comm_file import rank_of_address

    peers: dict[int, int | None] = {}  # rank -> the rank its text says closed first
    for rank, text in texts.items():
        found = [rank_of_address(attempt_dir, m[1], int(m[2])) for m in _PEER.finditer(text)]
        if found:
            mapped = {p for p in found if p is not None and p != rank}
            peers[rank] = mapped.pop() if len(mapped) == 1 else None
    named: dict[int, set[int]] = {}
    for rank, peer in peers.items():
        root = _first_closed(peer, peers)
        if root is not None:
            named.setdefault(root, set()).add(rank)
    if len(named) != 1:
        return []
    ((peer, seen_by),) = named.items()
    return [
        Item(  # who went first as the survivors saw it: a consequence may be, as in time
            source=Source.ERROR_TEXT,
            tier=Tier.FIRST_FAILURE,
            ranks=(peer,),
            says=f"Gloo on {ranks_label(sorted(seen_by))}: the connection to rank {peer} "
            "closed (its process went first)",
        )
    ]


def _first_closed(peer: int | None, peers: Mapping[int, int | None]) -> int | None:
    """Where a chain of closed connections starts: the first rank whose own text names no
    closed peer; None where the chain leaves what was recorded, or loops."""
    seen: set[int] = set()
    while peer is not None and peer in peers:
        if peer in seen:
            return None
        seen.add(peer)
        peer = peers[peer]
    return peer
