"""Launch values from SLURM's environment, for flags the user did not give.

Inside a SLURM job step (SLURM_JOB_ID set) `safelaunch train.py` needs no flags: the
node count, this node's rank, the master (the first host of the node list, expanded
with python-hostlist), the run id (the job id) and the ranks per node (the GPUs SLURM
gave the node) come from SLURM. Explicit flags always win; the banner says where each
value came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from safelaunch.errors import ConfigError

PORT_BASE, PORT_SPAN = 20000, 20000  # the master port: the same on every node of a job


def first_host(nodelist: str) -> str:
    """`gpu-[01-03,07]` -> `gpu-01`."""
    import hostlist  # type: ignore[import-untyped]  # python-hostlist; only inside SLURM

    try:
        hosts = hostlist.expand_hostlist(nodelist)
    except hostlist.BadHostlist as exc:
        raise ConfigError(
            f"SLURM_JOB_NODELIST={nodelist!r} is not a valid host list ({exc})",
            "give --master-addr explicitly",
        ) from None
    if not hosts:
        raise ConfigError(f"SLURM_JOB_NODELIST={nodelist!r} is empty", "give --master-addr")
    return str(hosts[0])


def _int(environ: Mapping[str, str], name: str) -> int:
    try:
        return int(environ[name].split("(")[0])  # SLURM writes e.g. "2(x3)" in some variables
    except ValueError:
        raise ConfigError(f"{name}={environ[name]!r} is not a number", "unset it") from None


def slurm_defaults(environ: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """{option: (value, where it came from)} for a job step inside SLURM; {} outside."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return {}
    found: dict[str, tuple[Any, str]] = {}
    count_var = next((v for v in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES") if v in environ), None)
    nodes = _int(environ, count_var) if count_var else 1
    if count_var:
        found["nnodes"] = (str(nodes), count_var)
    if nodes > 1:
        if "SLURM_NODEID" in environ:
            found["node_rank"] = (_int(environ, "SLURM_NODEID"), "SLURM_NODEID")
        nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
        if nodelist:
            found["master_addr"] = (first_host(nodelist), "first host of SLURM_JOB_NODELIST")
        port = PORT_BASE + (int(job) % PORT_SPAN if job.isdigit() else 0)
        found["master_port"] = (port, "derived from SLURM_JOB_ID")
        found["rdzv_id"] = (job, "SLURM_JOB_ID")
    gpus = environ.get("SLURM_GPUS_ON_NODE")
    if gpus and gpus.isdigit() and int(gpus) > 0:
        found["nproc_per_node"] = (gpus, "SLURM_GPUS_ON_NODE")
    return found
