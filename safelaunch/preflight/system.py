"""System checks before spawning: shared memory, limits, interfaces, addresses, stale env.

Each check is a pure rule over facts (sizes, limits, names) plus a thin reader, so the
rules are table-tested and the readers run for real.
"""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from safelaunch.vocab import StrEnum


class CheckLevel(StrEnum):
    OK = "ok"
    WARNING = "warning"
    ERROR = "error"


OK, WARNING, ERROR = CheckLevel.OK, CheckLevel.WARNING, CheckLevel.ERROR  # as the checks name them
SHM_MIN = 1 << 30  # below this DataLoader workers die with "Bus error" on real batches
NOFILE_MIN = 4096  # sockets per peer, DataLoader pipes and files add up per rank
MEMLOCK_MIN = 64 << 20  # RDMA (InfiniBand, GPUDirect) registers memory it must pin
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
# Set per process by a launcher (torchrun, deepspeed, accelerate, mpirun's torch wrappers),
# never per node by a scheduler: Kubeflow's PyTorchJob (and PAI, SageMaker, ...) give each
# pod RANK, WORLD_SIZE and MASTER_* for its node, which is no launch inside a launch.
PER_PROCESS_VARS = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID")


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One check's verdict: a code, one line of what, one line of how to fix it."""

    level: CheckLevel
    code: str
    message: str
    fix: str = ""


def shm_finding(size_bytes: int | None) -> Finding:
    """/dev/shm large enough for DataLoader workers?"""
    if size_bytes is None:
        return Finding(
            level=WARNING,
            code="shm-missing",
            message="/dev/shm is not mounted",
            fix="mount a tmpfs on /dev/shm (docker: --shm-size=8g)",
        )
    if size_bytes < SHM_MIN:
        return Finding(
            level=WARNING,
            code="shm-small",
            message=f"/dev/shm is only {size_bytes >> 20} MiB: DataLoader workers may die with "
            "'Bus error' or 'unable to allocate shared memory'",
            fix="give it at least 1 GiB (docker: --shm-size=8g; k8s: an emptyDir of medium Memory)",
        )
    return Finding(level=OK, code="shm", message=f"/dev/shm {size_bytes >> 30} GiB")


def read_shm_size(path: str = "/dev/shm") -> int | None:
    """Size of the shared-memory filesystem in bytes; None when it is missing."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    return stat.f_frsize * stat.f_blocks


def limits_finding(nofile_soft: int) -> Finding:
    """Enough file descriptors for the ranks' sockets, pipes and files?"""
    if nofile_soft != resource.RLIM_INFINITY and nofile_soft < NOFILE_MIN:
        return Finding(
            level=WARNING,
            code="nofile-low",
            message=f"open-files limit is {nofile_soft}: many ranks or DataLoader workers can hit "
            "'Too many open files'",
            fix=f"ulimit -n {NOFILE_MIN * 16} (or raise nofile in /etc/security/limits.conf)",
        )
    return Finding(level=OK, code="nofile", message=f"open-files limit {nofile_soft}")


# Ranks per CPU beyond which a launch is told it crowds the machine. Tests and CPU/Gloo
# jobs run a few ranks per CPU on purpose; a typo (--nproc-per-node=1000) starts that
# many python processes, each with torch's threads, and the machine thrashes silently.
RANKS_PER_CPU_MAX = 4


def crowding_finding(nproc: int, cpus: int) -> Finding:
    """Far more ranks than CPUs: said before they start (torchrun says nothing)."""
    crowded = nproc > RANKS_PER_CPU_MAX * max(cpus, 1)
    said = f"{nproc} ranks on {cpus} CPU(s)"
    if not crowded:
        return Finding(level=OK, code="crowded", message=said)
    why = f"{said}: each rank is a python process, the machine will be crowded"
    fix = "fewer ranks (--nproc-per-node=cpu starts one per CPU)"
    return Finding(level=WARNING, code="crowded", message=why, fix=fix)


def memlock_finding(memlock_soft: int, gpus: int) -> Finding:
    """Locked-memory limit: matters for NCCL over InfiniBand / RDMA, so only with GPUs."""
    if gpus and memlock_soft != resource.RLIM_INFINITY and memlock_soft < MEMLOCK_MIN:
        return Finding(
            level=WARNING,
            code="memlock-low",
            message=f"locked-memory limit is {memlock_soft >> 10} KiB: NCCL over InfiniBand/RDMA "
            "can fail to register memory",
            fix="ulimit -l unlimited (docker: --ulimit memlock=-1; SLURM: PropagateResourceLimits)",
        )
    return Finding(level=OK, code="memlock", message="locked-memory limit is enough")


def interface_findings(environ: Mapping[str, str], interfaces: Sequence[str]) -> list[Finding]:
    """NCCL_/GLOO_SOCKET_IFNAME name interfaces that exist (prefix, `^` exclude, `=` exact)."""
    findings = []
    for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        value = environ.get(variable)
        if not value:
            continue
        if value.startswith("^"):
            continue  # an exclusion list cannot name a missing interface wrongly
        exact = value.startswith("=")
        wanted = [w.strip() for w in value.lstrip("=").split(",") if w.strip()]
        if variable == "GLOO_SOCKET_IFNAME":  # Gloo opens every listed name, exactly
            matched = [w for w in wanted if w in interfaces]
            missing = len(matched) < len(wanted)
        else:  # NCCL: prefixes, or exact names after "="
            matched = [
                name
                for name in interfaces
                if any(name == w if exact else name.startswith(w) for w in wanted)
            ]
            missing = not matched
        if missing:
            findings.append(
                Finding(
                    level=ERROR,
                    code="ifname-missing",
                    message=f"{variable}={value} matches no interface on this host "
                    f"(it has {', '.join(interfaces)})",
                    fix=f"set {variable} to one of them, or unset it",
                )
            )
        else:
            findings.append(Finding(level=OK, code="ifname", message=f"{variable} -> {matched}"))
    return findings


def nested_finding(environ: Mapping[str, str]) -> Finding | None:
    """Launch variables already set: safelaunch inside another launcher? Only a launcher's
    per-process variables say so; a scheduler's per-node ones alone do not."""
    present = [name for name in dict.fromkeys(LAUNCH_VARS + PER_PROCESS_VARS) if name in environ]
    if not any(name in environ for name in PER_PROCESS_VARS):
        return None
    return Finding(
        level=WARNING,
        code="nested-launch",
        message=f"{', '.join(present)} already set in safelaunch's environment (a launch inside "
        "another launcher?): the ranks get their own values",
        fix="unset them, or run the script directly if the outer launcher already starts ranks",
    )


def address_finding(address: str) -> Finding:
    """MASTER_ADDR resolves?"""
    try:
        # bytes for a plain ASCII name: a str is encoded with the idna codec, whose import
        # (with stringprep and unicodedata) costs ~1.5 ms before any rank can start
        socket.getaddrinfo(address.encode() if address.isascii() else address, None)
    except OSError as exc:
        return Finding(
            level=ERROR,
            code="master-addr",
            message=f"MASTER_ADDR {address!r} does not resolve ({exc.strerror or exc})",
            fix="use an IP address or a host name this node can resolve (--master-addr)",
        )
    return Finding(level=OK, code="master-addr", message=f"MASTER_ADDR {address} resolves")


def system_findings(environ: Mapping[str, str], master_addr: str, gpus: int = 0) -> list[Finding]:
    """Every system check, read for real."""
    interfaces = [name for _, name in socket.if_nameindex()]
    findings = [
        shm_finding(read_shm_size()),
        limits_finding(resource.getrlimit(resource.RLIMIT_NOFILE)[0]),
        memlock_finding(resource.getrlimit(resource.RLIMIT_MEMLOCK)[0], gpus),
        *interface_findings(environ, interfaces),
        address_finding(master_addr),
    ]
    nested = nested_finding(environ)
    if nested is not None:
        findings.append(nested)
    return findings
