"""The DDP mistakes lint knows: each rule says what it saw, why it hurts, and the fix.

Every rule is tuned for few false positives on real training scripts (it fires on
what is there, never on what a helper module might do), and has a positive and a
negative fixture in tests/test_lint.py. `klass` and `signatures` use the failure
classes and signature ids of diagnose/signatures/ (a test keeps them in step), so a
failure can point back at the finding that predicted it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from safelaunch.lint import Severity
from safelaunch.lint.checks import (
    batchnorm_without_sync,
    collective_under_rank_condition,
    cuda_before_init,
    device_from_global_rank,
    find_unused_parameters,
    load_without_map_location,
    loader_not_sharded,
    model_not_wrapped,
    no_destroy,
    sampler_with_shuffle,
    sampler_without_set_epoch,
    set_device_missing,
    spawn_under_launcher,
)
from safelaunch.lint.scan import Script
from safelaunch.vocab import COMMUNICATION, DATA, ENVIRONMENT, MODEL, RESOURCES, FailureClass

Check = Callable[[Script], Iterator[ast.Call]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One mistake: how to see it, what it means, what to do."""

    id: str
    severity: Severity
    klass: FailureClass
    signatures: tuple[str, ...]  # failure signatures it leads to
    title: str
    why: str
    fix: str
    check: Check


RULES: tuple[Rule, ...] = (
    Rule(
        id="sampler-with-shuffle",
        severity=Severity.ERROR,
        klass=DATA,
        signatures=("sampler-and-shuffle",),
        title="DataLoader gets a DistributedSampler and shuffle=True",
        why="DataLoader refuses both (ValueError: sampler option is mutually exclusive with "
        "shuffle) on every rank, at the first epoch",
        fix="drop shuffle=True from the DataLoader: DistributedSampler(shuffle=True) shuffles",
        check=sampler_with_shuffle,
    ),
    Rule(
        id="sampler-without-set-epoch",
        severity=Severity.WARNING,
        klass=DATA,
        signatures=(),
        title="DistributedSampler in an epoch loop, but set_epoch is never called",
        why="the sampler seeds its shuffle with the epoch: without set_epoch every epoch "
        "repeats the same order",
        fix="call sampler.set_epoch(epoch) at the start of each epoch, before iterating",
        check=sampler_without_set_epoch,
    ),
    Rule(
        id="loader-not-sharded",
        severity=Severity.WARNING,
        klass=DATA,
        signatures=(),
        title="a shuffled DataLoader without a DistributedSampler in a distributed script",
        why="every rank reads the whole dataset: an epoch does N times the work and the ranks "
        "see overlapping samples",
        fix="sampler=DistributedSampler(dataset) (and shuffle=False on the DataLoader)",
        check=loader_not_sharded,
    ),
    Rule(
        id="model-not-wrapped",
        severity=Severity.WARNING,
        klass=MODEL,
        signatures=(),
        title="init_process_group and a training loop, but no model wrapped in DDP/FSDP",
        why="without DDP (or FSDP, or your own all_reduce of the .grad) gradients are never "
        "averaged: each rank trains its own copy and the copies drift apart",
        fix="model = DistributedDataParallel(model, device_ids=[local_rank]) before the loop",
        check=model_not_wrapped,
    ),
    Rule(
        id="set-device-missing",
        severity=Severity.WARNING,
        klass=ENVIRONMENT,
        signatures=("duplicate-gpu", "cuda-out-of-memory"),
        title="CUDA used as 'the current device' and torch.cuda.set_device is never called",
        why="the current device is cuda:0 on every rank: all ranks pile onto GPU 0 (out of "
        "memory, or NCCL's 'Duplicate GPU detected')",
        fix="torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before any CUDA work",
        check=set_device_missing,
    ),
    Rule(
        id="device-from-global-rank",
        severity=Severity.ERROR,
        klass=ENVIRONMENT,
        signatures=("invalid-device-ordinal", "duplicate-gpu"),
        title="a GPU chosen by the global RANK",
        why="RANK counts across nodes: on the second node it is past this node's GPUs "
        "(invalid device ordinal); only LOCAL_RANK indexes this node's GPUs",
        fix="use int(os.environ['LOCAL_RANK']) for set_device, .to(), device_ids",
        check=device_from_global_rank,
    ),
    Rule(
        id="collective-under-rank-condition",
        severity=Severity.WARNING,
        klass=COMMUNICATION,
        signatures=("collective-timeout", "collective-mismatch"),
        title="a collective called only under a rank condition",
        why="every rank of the group must call each collective: the ranks that skip it leave "
        "the others waiting (a hang, then a timeout)",
        fix="call it on every rank (move it out of the if); keep only the rank-0 work, "
        "e.g. printing or saving, inside",
        check=collective_under_rank_condition,
    ),
    Rule(
        id="batchnorm-without-syncbn",
        severity=Severity.HINT,
        klass=MODEL,
        signatures=(),
        title="BatchNorm under DDP without SyncBatchNorm",
        why="each rank normalises with its own batch's statistics: with small per-GPU batches "
        "training is noisier than the global batch suggests",
        fix="model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) before DDP (if the "
        "per-GPU batch is small)",
        check=batchnorm_without_sync,
    ),
    Rule(
        id="load-without-map-location",
        severity=Severity.WARNING,
        klass=RESOURCES,
        signatures=("cuda-out-of-memory",),
        title="torch.load without map_location in a distributed script",
        why="tensors load onto the device they were saved from (usually cuda:0): every rank "
        "fills GPU 0",
        fix="torch.load(path, map_location=f'cuda:{local_rank}') (or 'cpu')",
        check=load_without_map_location,
    ),
    Rule(
        id="find-unused-parameters",
        severity=Severity.HINT,
        klass=MODEL,
        signatures=("ddp-unused-parameters",),
        title="DDP(find_unused_parameters=True)",
        why="DDP then walks the autograd graph after every forward; it is needed only when "
        "some parameters really get no gradient",
        fix="keep it only if DDP asked for it; a fixed set of unused parameters can use "
        "static_graph=True instead",
        check=find_unused_parameters,
    ),
    Rule(
        id="cuda-before-init",
        severity=Severity.WARNING,
        klass=ENVIRONMENT,
        signatures=("duplicate-gpu",),
        title="CUDA work before init_process_group, with no set_device first",
        why="it creates a CUDA context on cuda:0 in every rank: GPU 0 holds N contexts, and "
        "NCCL may bind the wrong GPU",
        fix="torch.cuda.set_device(local_rank) first, then init_process_group, then CUDA work",
        check=cuda_before_init,
    ),
    Rule(
        id="spawn-under-launcher",
        severity=Severity.WARNING,
        klass=ENVIRONMENT,
        signatures=("port-in-use",),
        title="mp.spawn in a script that never reads the launcher's variables",
        why="safelaunch (like torchrun) already starts one process per rank: each one "
        "spawning its own ranks makes nproc x nproc processes fighting for the same port",
        fix="under a launcher read RANK/LOCAL_RANK/WORLD_SIZE and call your worker directly; "
        "keep mp.spawn for `python script.py` only",
        check=spawn_under_launcher,
    ),
    Rule(
        id="no-destroy-process-group",
        severity=Severity.HINT,
        klass=COMMUNICATION,
        signatures=("shutdown-crash",),
        title="init_process_group without destroy_process_group",
        why="the process group is then torn down by interpreter exit, where backends can "
        "abort or warn after the work is done",
        fix="call torch.distributed.destroy_process_group() at the end of training",
        check=no_destroy,
    ),
)
