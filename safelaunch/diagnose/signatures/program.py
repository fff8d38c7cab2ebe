"""The rest of the table, in matching order: data/sampling, the files a job reads and
writes (environment/launch, after the DataLoader's: a corrupt file a worker read is a
data fault), model/gradient, resources, then the ranks' deaths by signal (the most
generic, last)."""

from __future__ import annotations

import signal

from safelaunch.diagnose.signatures.signature import Signature
from safelaunch.vocab import (
    COMMUNICATION,
    DATA,
    ENVIRONMENT,
    MODEL,
    RESOURCES,
    UNKNOWN,
)

PROGRAM: tuple[Signature, ...] = (
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
        id="dataloader-worker-killed",
        klass=RESOURCES,
        patterns=(  # SIGKILL ("Killed"): what the kernel's OOM killer sends (torch 2.13)
            r"DataLoader worker \(pid \d+\) is killed by signal: Killed",
        ),
        meaning="a DataLoader worker was killed (SIGKILL): most often the OOM killer, the "
        "host's memory taken by the ranks and their workers",
        next_steps=(
            "check the kernel log for the OOM killer (dmesg | grep -i kill)",
            "fewer DataLoader workers (num_workers) or a smaller prefetch_factor",
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
    Signature(
        id="label-out-of-range",
        klass=DATA,
        patterns=(  # CPU (measured: torch 2.13); CUDA's device-side asserts of nll/cross_entropy
            r"Target -?\d+ is out of bounds",
            r"Assertion `(?:t|cur_target) >= 0 && (?:t|cur_target) < n_classes` failed",
        ),
        meaning="a label is outside [0, num_classes): the data's labels and the model's "
        "number of outputs disagree (or a padding label without ignore_index)",
        next_steps=(
            "check the labels' range against the model's classes: labels.min(), labels.max()",
            "labels that mark padding: cross_entropy(..., ignore_index=<that label>)",
        ),
    ),
    # --- files the job reads or writes (environment / launch) ---------------------
    Signature(
        id="checkpoint-corrupt",
        klass=ENVIRONMENT,
        patterns=(  # torch.load, measured with torch 2.13: truncated, empty, not a checkpoint
            r"PytorchStreamReader failed reading",
            r"UnpicklingError: invalid load key",
            r"EOFError: Ran out of input",
            r"_weights_only_unpickler\.py\", line \d+, in load\n[^\n]*raise EOFError\n",
        ),
        meaning="torch.load read a file that is not a whole checkpoint: cut short (a save "
        "that was killed, a full disk, a copy that did not finish), empty, or another kind "
        "of file (a git-lfs pointer, an HTML page)",
        next_steps=(
            "compare the file's size with a good one (ls -l); head -c 200 shows what it is",
            "load the previous checkpoint; save to a temporary name, then os.replace() it, so "
            "a killed save never leaves half a file",
        ),
    ),
    Signature(
        id="checkpoint-weights-only",
        klass=ENVIRONMENT,
        patterns=(r"Weights only load failed",),
        meaning="torch.load(weights_only=True, the default since torch 2.6) refused the file: "
        "it holds objects other than tensors (or is not a checkpoint at all)",
        next_steps=(
            "the message names the global it refused: allow it with "
            "torch.serialization.add_safe_globals([...]), or, for a file you trust, "
            "torch.load(..., weights_only=False)",
            "'Unsupported operand': the file is likely no checkpoint (head -c 200 shows it)",
        ),
    ),
    Signature(
        id="save-dir-missing",
        klass=ENVIRONMENT,
        patterns=(r"Parent directory [^\n]+ does not exist",),  # torch.save, torch 2.13
        meaning="torch.save into a directory that does not exist here (made by another rank, "
        "on another node, or not yet)",
        next_steps=(
            "make it on every node before saving: os.makedirs(path, exist_ok=True), then "
            "dist.barrier() so no rank saves before it exists",
        ),
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
            r"a leaf Variable that requires grad is being used in an in-place operation",
        ),
        meaning="the autograd graph was used wrongly (in-place change, second backward, "
        "a loss that does not depend on parameters)",
        next_steps=(
            "torch.autograd.set_detect_anomaly(True) names the operation",
            "replace the in-place op (x += y -> x = x + y); call backward once per forward",
        ),
    ),
    Signature(
        id="device-mismatch",
        klass=MODEL,
        patterns=(
            r"Expected all tensors to be on the same device",
            r"is not on the expected device",  # measured: a meta tensor meets a CPU one
            # one on CUDA, one not (the same message for two dtypes is no device fault)
            r"Input type \(torch\.cuda\.\w+\) and weight type \(torch\.\w+\)",
            r"Input type \(torch\.\w+\) and weight type \(torch\.cuda\.\w+\)",
        ),
        meaning="tensors on different devices met in one operation: the model, a batch or a "
        "buffer was not moved to the rank's device",
        next_steps=(
            "move the model and every batch to one device: model.to(device), "
            "batch.to(device), with device = torch.device('cuda', local_rank)",
            "two GPUs named: torch.cuda.set_device(local_rank) before building the model, "
            "and DDP(model, device_ids=[local_rank])",
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
