"""Joining a multi-node job: torch's rendezvous, the nodes' facts compared, this node placed.

`join` for the first round; `rejoin` for the next one of an elastic job (--nnodes MIN:MAX),
after a node was lost or to admit one that waits: the same steps over the new round.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from safelaunch import defaults
from safelaunch.config import LaunchConfig
from safelaunch.errors import RendezvousError
from safelaunch.rendezvous import Placement, assign
from safelaunch.rendezvous.keyvalue import Joined, KeyValue
from safelaunch.rendezvous.liveness import WATCHER
from safelaunch.rendezvous.membership import Membership
from safelaunch.rendezvous.roster import SPLIT_FIX, exchange
from safelaunch.rendezvous.rounds import my_record


def join(
    config: LaunchConfig,
    nproc: int,
    facts: Mapping[str, Any],
    host: str,
    say: Callable[[str], None],
    meanwhile: Callable[[], None] | None = None,
) -> Membership:
    """Rendezvous with the other nodes, exchange facts, and place this node's ranks.

    A node that does not host the store also tries to reach it (reach.py) and `say`s
    within seconds when it cannot. `meanwhile`: run while torch's rendezvous waits.
    """
    from safelaunch.rendezvous.reach import ReachProbe, probe_target

    target = probe_target(config)
    probe = ReachProbe(*target, say) if target is not None else None
    if probe is not None:
        probe.start()  # before torch's import: that alone takes seconds on a busy node
    try:
        from safelaunch.rendezvous import torchstore  # imports torch: multi-node only

        joined, store = torchstore.rendezvous(config, meanwhile)
    finally:
        if probe is not None:
            probe.stop()
    # A node that starts late joins an elastic job's later round: it learns the job's
    # attempt and restart count there (rounds.py), and brings none of its own.
    return _placed(config, joined, store, nproc, {**facts, **my_record(0, 0, None, 0)}, host)


def rejoin(
    membership: Membership,
    config: LaunchConfig,
    nproc: int,
    facts: Mapping[str, Any],
    host: str,
    *,
    attempt: int,
    restart_count: int,
) -> None:
    """The next round of an elastic job's rendezvous, taken over by `membership`.

    Every node that remains calls it before `attempt`, after the same verdict
    (diagnose/nodes.py); a node that started late waits in torch's rendezvous and joins
    the same round. The node ranks, world size and the workers' store are the new
    round's; `membership.round` says who left and who joined.
    """
    place = membership.placement
    mine = {**facts, **my_record(attempt, restart_count, membership.round, place.node)}
    # Into torch's next round together: it closes last_call_timeout after its MIN-th node,
    # and the nodes end the verdict seconds apart on a busy machine; one that came late
    # would wait for the round after (another stop to admit it). A lost node is not
    # waited for (its liveness counter stopped).
    timeout = float(config.rdzv_conf.get("join_timeout", defaults.JOIN_TIMEOUT_S))
    with contextlib.suppress(Exception):  # the store's host gone: torch's join says so
        membership.barrier(f"attempt/{attempt}/rejoin", timeout)
    joined, store = membership.next_round()
    membership.take(_placed(config, joined, store, nproc, mine, host, place.hosts))


def _placed(
    config: LaunchConfig,
    joined: Joined,
    store: KeyValue,
    nproc: int,
    facts: Mapping[str, Any],
    host: str,
    hosts_before: tuple[str, ...] = (),
) -> Membership:
    """The nodes of one round: records to node 0, its roster back, this node's ranks placed.

    O(N) in all (roster.py): node 0 reads every record at once and publishes one roster;
    every other node asks a constant number of operations.
    """
    interval = float(config.rdzv_conf.get("keep_alive_interval", defaults.KEEP_ALIVE_INTERVAL_S))
    attempts = int(config.rdzv_conf.get("keep_alive_max_attempt", defaults.KEEP_ALIVE_MAX_ATTEMPT))
    membership = Membership(
        store,
        joined,
        Placement(
            node=joined.node,
            nodes=joined.nodes,
            base_rank=0,
            world_size=0,
            master_addr=joined.master_addr,
            master_port=joined.master_port,
            run_id=config.rdzv_id or "none",
            hosts=(),
            nprocs=(),
        ),
        lost_after=max(interval * attempts, defaults.LOST_AFTER_FLOOR_S),
        beat_every=interval / 2,
    )
    timeout = float(config.rdzv_conf.get("join_timeout", defaults.JOIN_TIMEOUT_S))
    mine = {"host": host, "nproc": nproc, **facts}
    try:
        # Beating from before the exchange: the others find a node 0 that dies in it lost
        membership.start_beating()
        roster = exchange(
            store,
            joined.node,
            joined.nodes,
            mine,
            timeout,
            hosts_before=hosts_before,
            watcher_lost=lambda: WATCHER in membership.lost_nodes(time.monotonic()),
            prepare=membership.serve_workers,
        )
    except RendezvousError:
        membership.stop_beating()
        raise
    except Exception as exc:  # the store's host ended (an elastic round: its own error)
        membership.stop_beating()
        raise RendezvousError(
            f"lost contact with the rendezvous store in the round's exchange "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})",
            "see the console of the node that hosts the store (--rdzv-endpoint)",
        ) from None
    if roster.split:
        membership.stop_beating()
        raise RendezvousError(roster.split[0], SPLIT_FIX)
    if roster.missing:
        membership.stop_beating()
        raise RendezvousError(
            f"node(s) {', '.join(map(str, roster.missing))} never reported after the "
            f"rendezvous ({timeout:g} s)",
            "check that every node runs safelaunch with the same rendezvous flags",
        )
    base, world = assign(joined.node, roster.nprocs)
    membership.placement = replace(
        membership.placement,
        base_rank=base,
        world_size=world,
        hosts=roster.hosts,
        nprocs=roster.nprocs,
    )
    membership.round = roster.round
    membership.met_for(roster.round.attempt)
    if roster.problems:
        membership.leave(timeout=5)
        raise RendezvousError(
            "; ".join(roster.problems),
            "install the same torch/CUDA/NCCL/driver on every node (safelaunch doctor on each)",
            preflight=True,
        )
    return membership
