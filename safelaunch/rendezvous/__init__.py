"""Multi-node: joining the job through torch's own rendezvous, and keeping the nodes in step.

Membership (who is in, each node's rank, where the workers' store is) comes from
torch's rendezvous handlers, c10d or static, exactly as torchrun gets it; torch is
imported for that only (torchstore.py), and only when --nnodes > 1. What safelaunch
adds travels as keys in torch's TCPStore under `safelaunch/<run id>/`: each node's
preflight facts, attempt barriers, "stop" announcements, liveness counters and the
end-of-attempt summaries from which every node draws the same conclusion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where this node's ranks sit in the whole job (torchrun's rank assignment)."""

    node: int  # GROUP_RANK
    nodes: int  # GROUP_WORLD_SIZE
    base_rank: int  # RANK of local rank 0: the lower nodes' local world sizes summed
    world_size: int
    master_addr: str  # the workers' store (hosted by the rendezvous: TORCHELASTIC_USE_AGENT_STORE)
    master_port: int
    run_id: str  # TORCHELASTIC_RUN_ID
    hosts: tuple[str, ...]  # per node
    nprocs: tuple[int, ...]  # per node
    # TORCHELASTIC_RESTART_COUNT when it is not the attempt's number: an elastic job's
    # membership changes start attempts that are not restarts (torchrun's count)
    restart_count: int | None = None


def assign(node: int, nprocs: Sequence[int]) -> tuple[int, int]:
    """(RANK of this node's local rank 0, WORLD_SIZE), as torchrun assigns them."""
    return sum(nprocs[:node]), sum(nprocs)


FACT_NAMES = {
    "torch": "torch",
    "cuda": "torch's CUDA",
    "nccl": "NCCL",
    "driver": "NVIDIA driver",
    "gpus": "visible GPUs",
}


def fact_mismatches(facts: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per fact that differs between nodes: `NCCL: 2.21.5 on node 0 (a), 2.19.3 on 1`."""
    problems = []
    for key, name in FACT_NAMES.items():
        values: dict[str, list[str]] = {}
        for node, node_facts in enumerate(facts):
            where = f"node {node} ({node_facts.get('host', '?')})"
            values.setdefault(str(node_facts.get(key)), []).append(where)
        if len(values) > 1:
            parts = [f"{value} on {', '.join(nodes)}" for value, nodes in values.items()]
            problems.append(f"{name} differs between nodes: {'; '.join(parts)}")
    return problems
