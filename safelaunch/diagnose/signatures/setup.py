"""The first part of the table, in matching order: environment/launch, then communication."""

from __future__ import annotations

from safelaunch.diagnose.signatures.signature import Signature
from safelaunch.vocab import COMMUNICATION, ENVIRONMENT

SETUP: tuple[Signature, ...] = (
    # --- environment / launch ---------------------------------------------------
    Signature(
        id="nccl-not-built",
        klass=ENVIRONMENT,
        patterns=(r"Distributed package doesn't have NCCL built in",),
        meaning="the job asked for NCCL, but this torch build has none (a CPU build)",
        next_steps=(
            "on CPU use the gloo backend: init_process_group('gloo')",
            "on GPUs install a CUDA build of torch matching the driver",
        ),
        isolation_helps=True,
    ),
    Signature(
        id="pg-not-initialized",
        klass=ENVIRONMENT,
        patterns=(r"Default process group has not been initialized",),
        meaning="a collective ran before init_process_group (or after destroy_process_group)",
        next_steps=("call torch.distributed.init_process_group() before any collective or DDP",),
    ),
    Signature(
        id="torch-without-cuda",
        klass=ENVIRONMENT,
        patterns=(r"Torch not compiled with CUDA enabled",),
        meaning="the code uses CUDA, but this torch build is CPU-only",
        next_steps=("install a CUDA build of torch, or keep tensors on CPU (device='cpu')",),
    ),
    Signature(
        id="invalid-device-ordinal",
        klass=ENVIRONMENT,
        patterns=(r"invalid device ordinal",),
        meaning="a rank asked for a GPU index that CUDA_VISIBLE_DEVICES does not show it",
        next_steps=(
            "use torch.cuda.set_device(int(os.environ['LOCAL_RANK']))",
            "give --nproc-per-node at most the number of visible GPUs",
        ),
    ),
    Signature(
        id="no-cuda-gpus",
        klass=ENVIRONMENT,
        patterns=(
            r"No CUDA GPUs are available",
            r"ProcessGroupNCCL is only supported with GPUs, no GPUs found",
        ),
        meaning="the rank sees no GPU (no driver, or CUDA_VISIBLE_DEVICES hides them all)",
        next_steps=("check nvidia-smi and CUDA_VISIBLE_DEVICES", "on CPU use the gloo backend"),
    ),
    Signature(
        id="duplicate-gpu",
        klass=ENVIRONMENT,
        patterns=(r"Duplicate GPU detected",),
        meaning="two ranks use the same GPU",
        next_steps=("call torch.cuda.set_device(LOCAL_RANK) before init_process_group",),
    ),
    Signature(
        id="port-in-use",
        klass=ENVIRONMENT,
        patterns=(r"EADDRINUSE", r"address already in use"),
        meaning="MASTER_PORT is already taken on the rank-0 host",
        next_steps=("omit --master-port to get a free one, or pick another port",),
    ),
    # before store-unreachable: an unresolvable name also prints the generic timeout
    Signature(
        id="name-resolution",
        klass=ENVIRONMENT,
        patterns=(r"network addresses of .* cannot be retrieved", r"Name or service not known"),
        meaning="MASTER_ADDR (or a peer's host name) does not resolve",
        next_steps=("use an IP address, or fix the host name in --master-addr / DNS",),
    ),
    Signature(
        id="store-unreachable",
        klass=ENVIRONMENT,
        patterns=(
            r"client socket has timed out after \d+ms while trying to connect",
            r"TCP client failed to connect/validate",
        ),
        meaning="ranks cannot reach the TCPStore at MASTER_ADDR:MASTER_PORT",
        next_steps=(
            "check MASTER_ADDR resolves and MASTER_PORT is open from every node (firewall)",
            "check that rank 0 started at all (its log)",
        ),
    ),
    Signature(
        id="store-clients-missing",
        klass=ENVIRONMENT,
        patterns=(r"Timed out after \d+ seconds waiting for clients",),
        meaning="not every rank reached the rendezvous in time",
        next_steps=("find the rank that never started or crashed early (its log)",),
    ),
    # --- communication ----------------------------------------------------------
    Signature(
        id="peer-connection-closed",
        klass=COMMUNICATION,
        patterns=(r"Connection closed by peer", r"Connection reset by peer"),
        meaning="a peer rank went away mid-collective (usually it crashed first)",
        next_steps=("look at the rank that failed first",),
        consequence=True,
    ),
    Signature(
        id="store-connection-lost",
        klass=COMMUNICATION,
        patterns=(r"Failed to recv, got 0 bytes",),
        meaning="the TCPStore (hosted by rank 0) went away",
        next_steps=("look at rank 0's log",),
        consequence=True,
    ),
    Signature(
        id="collective-mismatch",
        klass=COMMUNICATION,
        patterns=(
            r"Detected mismatch between collectives on ranks",
            r"Received data size doesn't match expected size",
            r"op\.preamble\.length <= op\.nbytes",
        ),
        # the byte counts Gloo compares differ for another dtype too (measured: float32 vs int64)
        meaning="ranks called different collectives, or the same one with different shapes "
        "or dtypes",
        next_steps=(
            "make every rank issue the same collectives in the same order with the same shapes "
            "and dtypes",
            "rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL (not with DDP on torch 2.13: it crashes)",
        ),
        isolation_helps=True,
    ),
    Signature(
        id="collective-timeout",
        klass=COMMUNICATION,
        patterns=(
            r"Timed out waiting \d+ms for (?:recv|send) operation",
            r"failed to pass monitoredBarrier",
            r"Watchdog caught collective operation timeout",
            r"watchdog got stuck",
        ),
        meaning="a collective never completed: a rank is elsewhere, or the network is stuck",
        next_steps=(
            "find the rank that is not in the collective (safelaunch's hang report names it)",
            "rerun with NCCL_DEBUG=INFO; bisect NCCL_P2P_DISABLE=1 / NCCL_SHM_DISABLE=1 / "
            "NCCL_IB_DISABLE=1",
        ),
        isolation_helps=True,
    ),
    Signature(
        id="nccl-remote-error",
        klass=COMMUNICATION,
        patterns=(r"ncclRemoteError", r"remote process exited or there was a network error"),
        meaning="NCCL lost a peer: it died, or the network between them failed",
        next_steps=("look at the rank that failed first; check the links between the nodes",),
        consequence=True,
    ),
    Signature(
        id="nccl-system-error",
        klass=COMMUNICATION,
        patterns=(r"ncclSystemError", r"unhandled system error", r"No route to host"),
        meaning="NCCL could not set up or use its network (interface, firewall, IB)",
        next_steps=(
            "rerun with NCCL_DEBUG=INFO and set NCCL_SOCKET_IFNAME to the right interface",
            "bisect NCCL_IB_DISABLE=1 / NCCL_P2P_DISABLE=1 / NCCL_SHM_DISABLE=1",
        ),
        isolation_helps=True,
    ),
    Signature(
        id="nccl-internal-error",
        klass=COMMUNICATION,
        patterns=(r"ncclInternalError", r"ncclUnhandledCudaError", r"unhandled cuda error"),
        meaning="NCCL failed internally or on a CUDA call (driver, topology, version mismatch)",
        next_steps=(
            "rerun with NCCL_DEBUG=INFO; check driver, CUDA and NCCL versions agree on all nodes",
        ),
        isolation_helps=True,
    ),
)
