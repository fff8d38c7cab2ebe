"""Launch values from SLURM's environment, for flags the user did not give.

Inside a SLURM job step (SLURM_JOB_ID set) `safelaunch train.py` needs no flags: the
node count, this node's rank, the master (the first host of the node list, expanded
with python-hostlist), the run id (the job id) and the ranks per node (the GPUs SLURM
gave the node) come from SLURM. Explicit flags always win; the banner says where each
value came from.

Inside an allocation, an `srun -N<k>` step may run on a subset of the job's nodes: the
step's own variables (SLURM_STEP_NUM_NODES, SLURM_STEP_NODELIST) describe where this
safelaunch's peers are, so they win over the job's (SLURM_JOB_NUM_NODES,
SLURM_JOB_NODELIST). SLURM_NODEID is already relative to the step (measured with
SLURM 22.05: `srun -N1 -r1` on a two-node job gives SLURM_NODEID=0, SLURM_NNODES=1).

A variable that cannot be read is never dropped in silence: the node count, node rank
and node list are refused (the job would not be the one SLURM placed); a value that
only sets a default (the GPUs per node, the port derived from the job id) is not used,
with one warning naming the variable and its value (slurm_unread).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from safelaunch import values
from safelaunch.errors import ConfigError

PORT_BASE, PORT_SPAN = 20000, 20000  # the master port: the same on every node of a job
# The step's own values first: a step may hold fewer nodes than the job (see above).
_NODE_COUNT = ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
_NODE_LIST = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")


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
    text = environ[name].split("(")[0]  # SLURM writes e.g. "2(x3)" in some variables
    try:
        value = values.integer(name, text)
    except ConfigError:
        raise ConfigError(f"{name}={environ[name]!r} is not a number", "unset it") from None
    values.bounded(name, value, 0, values.MAX_NODES, "unset it")
    return value


def slurm_defaults(environ: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """{option: (value, where it came from)} for a job step inside SLURM; {} outside."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return {}
    found: dict[str, tuple[Any, str]] = {}
    count_var = next((v for v in _NODE_COUNT if v in environ), None)
    nodes = _int(environ, count_var) if count_var else 1
    if count_var:
        found["nnodes"] = (str(nodes), count_var)
    if nodes > 1:
        if "SLURM_NODEID" in environ:
            found["node_rank"] = (_int(environ, "SLURM_NODEID"), "SLURM_NODEID")
        list_var = next((v for v in _NODE_LIST if environ.get(v)), None)
        if list_var:
            found["master_addr"] = (first_host(environ[list_var]), f"first host of {list_var}")
        port = PORT_BASE + (int(job) % PORT_SPAN if _job_number(job) else 0)
        found["master_port"] = (port, "derived from SLURM_JOB_ID")
        found["rdzv_id"] = (job, "SLURM_JOB_ID")
    gpus = environ.get("SLURM_GPUS_ON_NODE")
    if gpus and _gpu_count(gpus):
        found["nproc_per_node"] = (gpus, "SLURM_GPUS_ON_NODE")
    return found


def _job_number(job: str) -> bool:
    return job.isascii() and job.isdigit()


def _gpu_count(gpus: str) -> bool:
    return gpus.isascii() and gpus.isdigit() and 0 < int(gpus) <= values.MAX_NPROC


def slurm_unread(environ: Mapping[str, str]) -> dict[str, str]:
    """{option: one warning line} for each SLURM variable that is set, cannot be read, and
    would have given that option's default (slurm_defaults leaves it out, or falls back)."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return {}
    unread = {}
    if not _job_number(job):
        unread["master_port"] = (
            f"SLURM_JOB_ID={job!r} is not a job number: every node derives master port "
            f"{PORT_BASE} from it; give --master-port to choose one"
        )
    gpus = environ.get("SLURM_GPUS_ON_NODE")
    if gpus and not _gpu_count(gpus):
        unread["nproc_per_node"] = (
            f"SLURM_GPUS_ON_NODE={gpus!r} is not a GPU count (1 to {values.MAX_NPROC}): not "
            "used for the ranks per node; give --nproc-per-node"
        )
    return unread


def node_name(environ: Mapping[str, str]) -> str | None:
    """The node's name as SLURM knows it (SLURMD_NODENAME), for labels; None outside SLURM.

    getfqdn() can say `localhost` on cluster nodes whose /etc/hosts lists the hostname
    on 127.0.0.1 (and says the host, not the node, where several slurmd share a host).
    """
    if not environ.get("SLURM_JOB_ID"):
        return None
    return environ.get("SLURMD_NODENAME") or None


def in_step(environ: Mapping[str, str]) -> bool:
    """Inside an srun job step, where SLURM signals every process of the step itself.

    Measured (SLURM 22.05, proctrack/linuxproc; cgroup tracking reaches every process
    too): scancel, a time limit and `--signal=USR1@N` reach the ranks directly, even in
    their own sessions. The batch script's own step has no SLURM_STEP_ID.
    """
    return bool(environ.get("SLURM_JOB_ID")) and bool(environ.get("SLURM_STEP_ID"))
