"""The live snapshots (for `safelaunch status`) through the store: O(N) in all, not N^2.

Every node publishes its snapshot (one JSON of ~5 KB with 8 ranks) every second or two.
Only node 0 reads them all: its launcher writes the copies beside its own, so `status`
on node 0 shows every node (on another node, that node's own ranks). Another node
needs one thing from the others' snapshots: their hang watches (`--hang-timeout auto`
waits as long as the longest deadline any node applies, and declares nothing while
another node's ranks progress). Node 0 publishes that as a digest of at most six
entries, the ones those two rules can depend on, and each other node reads that one
key instead of N snapshots.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from safelaunch.rendezvous.liveness import WATCHER, Counters

DIGEST_KEEP = 2  # of each kind: enough that a reader leaving itself out keeps the extreme one

HangWatchSaid = tuple[float, float] | None  # (deadline, quiet) a node's watch said; None: unheard


@dataclass(frozen=True, slots=True, kw_only=True)
class Shared:
    """What this node got back: the other nodes' snapshots (node 0 only), their hang watches."""

    snapshots: dict[int, str]
    hangs: dict[int, HangWatchSaid] | None  # None: read them from `snapshots` (node 0)


def _prefix(attempt: int) -> str:
    return f"attempt/{attempt}/live"


def hang_said(snapshot: str) -> HangWatchSaid:
    """(hang_deadline_s, hang_quiet_s) of one snapshot; None when it says none (yet)."""
    try:
        said = json.loads(snapshot)
        deadline, quiet = said["hang_deadline_s"], said["hang_quiet_s"]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(deadline, (int, float)) and isinstance(quiet, (int, float)):
        return float(deadline), float(quiet)
    return None


def digest(said: Mapping[int, HangWatchSaid], nodes: int) -> list[list[float | int | None]]:
    """The entries every other node's hang watch can depend on: the lowest nodes not heard
    from (their deadline is the fixed one), the longest deadlines and the least quiet
    nodes, DIGEST_KEEP of each, ties to the lowest node (as HangWatch breaks them)."""
    unheard = [n for n in range(nodes) if said.get(n) is None][:DIGEST_KEEP]
    heard = {n: v for n, v in said.items() if v is not None}
    longest = sorted(heard, key=lambda n: (-heard[n][0], n))[:DIGEST_KEEP]
    quietest = sorted(heard, key=lambda n: (heard[n][1], n))[:DIGEST_KEEP]
    chosen = sorted(set(unheard) | set(longest) | set(quietest))
    return [[n, *heard.get(n, (None, None))] for n in chosen]


def read_digest(entries: object, node: int) -> dict[int, HangWatchSaid]:
    """The other nodes' hang watches from a digest; {} when it is not one."""
    found: dict[int, HangWatchSaid] = {}
    if not isinstance(entries, list):
        return found
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], int)):
            continue
        other, deadline, quiet = entry
        if other == node:
            continue
        numbers = isinstance(deadline, (int, float)) and isinstance(quiet, (int, float))
        found[other] = (float(deadline), float(quiet)) if numbers else None
    return found


def share(store: Counters, node: int, nodes: int, attempt: int, snapshot: str) -> Shared:
    """This node's snapshot out; node 0: every other one in, and the digest out."""
    prefix = _prefix(attempt)
    store.set(f"{prefix}/{node}", snapshot)
    if node != WATCHER:
        key = f"{prefix}/hangs"
        if not store.check([key]):
            return Shared(snapshots={}, hangs={})
        try:
            entries = json.loads(store.get(key).decode())
        except ValueError:
            return Shared(snapshots={}, hangs={})
        return Shared(snapshots={}, hangs=read_digest(entries, node))
    others = {}
    for other in range(nodes):
        key = f"{prefix}/{other}"
        if other != node and store.check([key]):
            others[other] = store.get(key).decode()
    said = {n: hang_said(text) for n, text in {node: snapshot, **others}.items()}
    store.set(f"{prefix}/hangs", json.dumps(digest(said, nodes)))
    return Shared(snapshots=others, hangs=None)
