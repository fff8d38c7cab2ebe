"""The failure knowledge base: every known signature, as data, in one place.

Texts are the exact ones measured with torch 2.13 (shared/reference/diagnosis-facts.md);
GPU-only texts are known but were not reproduced here. Order matters: the first match
wins, so specific signatures come before generic ones. Matching lives in match.py; what a
Gloo rerun cannot run, in gloo_limits.py.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from safelaunch.vocab import (
    COMMUNICATION,
    DATA,
    ENVIRONMENT,
    MODEL,
    RESOURCES,
    UNKNOWN,
    FailureClass,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Signature:
    """A recognisable failure: how to spot it, what it means, what to do next."""

    id: str
    klass: FailureClass
    patterns: tuple[str, ...] = ()  # regular expressions over the rank's log (any may match)
    signals: tuple[int, ...] = ()  # or: the rank died of one of these signals
    meaning: str
    next_steps: tuple[str, ...]
    isolation_helps: bool = False  # a Gloo rerun can tell the network from the program
    consequence: bool = False  # seen on survivors after a peer died: never the root cause


SIGNATURES: tuple[Signature, ...] = (
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
        meaning="ranks called different collectives, or the same one with different shapes",
        next_steps=(
            "make every rank issue the same collectives in the same order with the same shapes",
            "rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL (not with DDP on torch 2.13: it crashes)",
        ),
        isolation_helps=True,
    ),
    Signature(
        id="collective-timeout",
        klass=COMMUNICATION,
        patterns=(
            r"Timed out waiting \d+ms for recv operation",
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
    # --- data / sampling --------------------------------------------------------
    Signature(
        id="sampler-and-shuffle",
        klass=DATA,
        patterns=(r"sampler option is mutually exclusive with shuffle",),
        meaning="DataLoader got both a sampler and shuffle=True",
        next_steps=(
            "drop shuffle=True; use DistributedSampler(shuffle=True) and call "
            "sampler.set_epoch(epoch) every epoch",
        ),
    ),
    Signature(
        id="shm-too-small",
        klass=DATA,
        patterns=(
            r"unable to allocate shared memory\(shm\)",  # torch 2.13, measured with 8 MiB shm
            r"insufficient shared memory \(shm\)",
            r"DataLoader worker \(pid \d+\) is killed by signal: Bus error",
            r"NCCL WARN Error: failed to extend /dev/shm",
        ),
        meaning="/dev/shm is too small for DataLoader workers (or NCCL)",
        next_steps=("enlarge /dev/shm (docker run --shm-size=16g), or num_workers=0 to confirm",),
    ),
    Signature(
        id="collate-size-mismatch",
        klass=DATA,
        patterns=(r"stack expects each tensor to be equal size",),
        meaning="samples of different sizes in one batch: the default collate cannot stack them",
        next_steps=("pad or crop samples to one size, or pass a collate_fn that pads",),
    ),
    Signature(
        id="dataloader-worker-error",
        klass=DATA,
        patterns=(r"Caught \w+ in DataLoader worker process \d+",),
        meaning="the dataset (or its transforms / collate_fn) raised inside a DataLoader "
        "worker: a bad sample, a missing file, a transform bug",
        next_steps=(
            "the worker's own traceback (shown as the location) names the line",
            "rerun with num_workers=0 to debug the sample in the main process",
        ),
    ),
    Signature(
        id="dataloader-worker-died",
        klass=DATA,
        patterns=(
            r"DataLoader worker \(pid\(s\) .*\) exited unexpectedly",
            # a worker killed (OOM killer: "Killed"), measured with torch 2.13; Bus error is shm
            r"DataLoader worker \(pid \d+\) is killed by signal",
        ),
        meaning="a DataLoader worker process died (often /dev/shm or memory)",
        next_steps=("rerun with num_workers=0 to see the worker's own error",),
    ),
    # --- model / gradient -------------------------------------------------------
    Signature(
        id="ddp-unused-parameters",
        klass=MODEL,
        patterns=(r"Expected to have finished reduction in the prior iteration",),
        meaning="some parameters got no gradient in a step (DDP cannot finish its all-reduce)",
        next_steps=(
            "use every parameter in the loss, or DDP(..., find_unused_parameters=True)",
            "TORCH_DISTRIBUTED_DEBUG=INFO names the parameters",
        ),
    ),
    Signature(
        id="ddp-model-mismatch",
        klass=MODEL,
        patterns=(
            r"DDP expects same model across all ranks",
            # same parameter count, other shapes (measured: torch 2.13, Gloo)
            r"appears not to match sizes of the same param in process",
        ),
        meaning="ranks built different models (parameter count or shapes differ)",
        next_steps=("build the same model on every rank; no rank-dependent layers",),
    ),
    Signature(
        id="autograd-graph-misuse",
        klass=MODEL,
        patterns=(
            r"modified by an inplace operation",
            r"Trying to backward through the graph a second time",
            r"does not require grad and does not have a grad_fn",
        ),
        meaning="the autograd graph was used wrongly (in-place change, second backward, "
        "a loss that does not depend on parameters)",
        next_steps=(
            "torch.autograd.set_detect_anomaly(True) names the operation",
            "replace the in-place op (x += y -> x = x + y); call backward once per forward",
        ),
    ),
    Signature(
        id="non-finite-values",
        klass=MODEL,
        patterns=(r"returned nan values in its", r"is non-finite"),
        meaning="NaN or inf in the forward/backward pass",
        next_steps=(
            "lower the learning rate; check inputs for NaN; try gradient clipping",
            "look at BatchNorm with tiny batches and at log/sqrt/div of zero",
        ),
    ),
    # --- resources ----------------------------------------------------------------
    Signature(
        id="cuda-out-of-memory",
        klass=RESOURCES,
        patterns=(r"CUDA out of memory", r"torch\.OutOfMemoryError"),
        meaning="a GPU ran out of memory",
        next_steps=(
            "lower the per-rank batch size, use gradient accumulation or checkpointing",
            "check nothing else holds memory on that GPU (nvidia-smi)",
        ),
    ),
    Signature(  # before host-out-of-memory: a thread without a stack is "Cannot allocate"
        id="thread-limit",
        klass=RESOURCES,
        patterns=(  # Python (not its "can't create new thread at interpreter shutdown"), fork,
            # OpenBLAS, OpenMP (GNU, Intel), Rust (tokenizers, rayon), a shell, std::thread
            r"can't start new thread",
            r"pthread_create\W{0,4}(?:failed|Resource temporarily unavailable)",
            r"(?:BlockingIOError|OSError): \[Errno 11\] Resource temporarily unavailable",
            r"Thread creation failed|unable to allocate necessary resources for OMP thread",
            r"failed to spawn thread|code: 11, kind: WouldBlock",
            r"fork: (?:retry: )?Resource temporarily unavailable",
            r"'std::system_error'\n[^\n]{0,24}?what\(\):\s+Resource temporarily unavailable",
        ),
        meaning="the rank could not start a thread or process: a limit on processes and "
        "threads (ulimit -u, a container's pids.max) or on address space (ulimit -v) is reached",
        next_steps=(
            "check the ranks' limits: ulimit -u, ulimit -v (RLIMIT_AS: each thread's stack "
            "needs address space), a container's pids.max; raise them (ulimit -u 65536)",
            "fewer threads per rank: OMP_NUM_THREADS / torch.set_num_threads (threads x ranks "
            "x DataLoader workers add up)",
            "fewer DataLoader workers (num_workers): each is a process with threads of its own",
        ),
    ),
    Signature(
        id="host-out-of-memory",
        klass=RESOURCES,
        # a fork or mmap refused: ENOMEM ("[Errno 12] Cannot allocate memory")
        patterns=(r"DefaultCPUAllocator: can't allocate memory", r"Cannot allocate memory"),
        meaning="the host ran out of memory",
        next_steps=("lower batch size or DataLoader workers; check memory per rank x ranks",),
    ),
    Signature(
        id="disk-full",
        klass=RESOURCES,
        patterns=(
            r"No space left on device",
            r"\[Errno 28\]",
            # torch.save onto a full disk (measured: torch 2.13 writing to /dev/full)
            r"enforce fail at inline_container\.cc:\d+\] \. unexpected pos",
        ),
        meaning="a disk (or /dev/shm, or /tmp) is full: writing a checkpoint, log or cache failed",
        next_steps=(
            "df -h on the checkpoint, log and /tmp directories (and /dev/shm)",
            "keep fewer checkpoints, or save from rank 0 only",
        ),
    ),
    Signature(
        id="too-many-open-files",
        klass=RESOURCES,
        patterns=(r"Too many open files", r"\[Errno 24\]", r"received 0 items of ancdata"),
        meaning="the process hit its open-files limit (often DataLoader workers sharing tensors)",
        next_steps=(
            "raise the limit: ulimit -n 65536 (or LimitNOFILE in the service/job)",
            "torch.multiprocessing.set_sharing_strategy('file_system')",
        ),
    ),
    Signature(
        id="state-dict-mismatch",
        klass=MODEL,
        patterns=(r"Error\(s\) in loading state_dict for",),
        meaning="a checkpoint does not fit the model (missing/unexpected keys or other shapes)",
        next_steps=(
            "save and load the same architecture; strip the 'module.' prefix DDP adds "
            "(save model.module.state_dict())",
        ),
    ),
    Signature(
        id="shape-mismatch",
        klass=MODEL,
        patterns=(
            r"shapes cannot be multiplied",
            r"must match the size of tensor b",
            r"Expected input batch_size \(\d+\) to match target batch_size",
        ),
        meaning="tensors of incompatible shapes met in the model or the loss",
        next_steps=("print the shapes at the line shown; check the input size the model expects",),
    ),
    Signature(
        id="shutdown-crash",
        klass=COMMUNICATION,
        patterns=(r"terminate called without an active exception",),
        meaning=(
            "the rank crashed while shutting down, after its work (a known torch/Gloo "
            "teardown crash): not a training failure"
        ),
        next_steps=(
            "before exiting: del the DDP model, gc.collect(), then dist.destroy_process_group()",
            "the results are likely complete: check the last lines of every rank's log",
        ),
    ),
    Signature(
        id="killed-sigkill",
        klass=RESOURCES,
        signals=(signal.SIGKILL,),
        meaning="killed by SIGKILL: most often the kernel's OOM killer",
        next_steps=(
            "check: dmesg -T | grep -i -E 'killed process|out of memory' (or journalctl -k)",
            "lower memory per rank (batch size, DataLoader workers, pinned memory)",
        ),
    ),
    Signature(
        id="native-crash",
        klass=UNKNOWN,
        signals=(signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE),
        meaning="a native crash (C/C++/CUDA code)",
        next_steps=(
            "the rank's log has the Python stack at the crash (faulthandler)",
            "rerun the failing step on one process; check library versions",
        ),
        isolation_helps=True,
    ),
)
