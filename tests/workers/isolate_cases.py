"""Jobs for the isolation reruns; CASE picks one. Plain torch, as a user would write them.

nccl_train: asks for NCCL (absent on a CPU build) and trains a tiny DDP model
raise: rank 1 raises in compute_loss at step 2
shape: rank 1 all-reduces a tensor of another shape
flaky: fails at step 3, except in a rerun (SAFELAUNCH_RERUN); reports steps, loops long
       (FLAKY_SLOW: a step of the rerun takes 5 s)
plain: trains and succeeds
late_ddp: every rank fails after a first all_reduce, except in a rerun; DDP comes after
transport: rank 1 fails unless NCCL_SHM_DISABLE=1
distributed: rank 1 fails only when there are several ranks
The model is a DistributedDataParallel in nccl_train and late_ddp, and with DDP=1; the other
cases all-reduce its gradients by hand (DDP's constructor imports torch._dynamo: ~1.25 CPU-s a
rank, and these cases are about the reruns, not about DDP).
"""

import os
import time

import torch
import torch.distributed as dist
from torch.distributed import init_process_group

import safelaunch

CASE = os.environ["CASE"]


def compute_loss(model, batch, step):
    if CASE == "raise" and dist.get_rank() == 1 and step == 2:
        raise ValueError(f"loss went negative at step {step}")
    return model(batch).sum()


def main():
    init_process_group("nccl" if CASE == "nccl_train" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if CASE == "nccl_train":  # a second group, named by backend too
        dist.all_reduce(torch.ones(2), group=dist.new_group(backend="nccl"))
    if CASE == "transport" and rank == 1 and os.environ.get("NCCL_SHM_DISABLE") != "1":
        raise RuntimeError("unhandled system error: shm transport failed")
    if CASE == "distributed" and rank == 1 and world > 1:
        raise RuntimeError("rank 1 got a different shard count")
    if CASE == "late_ddp":
        dist.all_reduce(torch.ones(3))
        if "SAFELAUNCH_RERUN" not in os.environ:
            raise RuntimeError("lost the connection before building the model")
    if CASE == "shape":
        dist.all_reduce(torch.ones(3))
        dist.all_reduce(torch.ones(4 + rank))
    model = torch.nn.Linear(4, 2)
    ddp = CASE in ("nccl_train", "late_ddp") or os.environ.get("DDP") == "1"
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    steps = 400 if CASE == "flaky" else 4
    for step in range(steps):
        loss = compute_loss(model, torch.ones(8, 4), step)
        loss.backward()
        if not ddp:
            for param in model.parameters():
                dist.all_reduce(param.grad)
        safelaunch.heartbeat(step=step)
        if CASE == "flaky":
            if step == 3 and "SAFELAUNCH_RERUN" not in os.environ:
                raise RuntimeError("lost a peer at step 3")
            slow = os.environ.get("FLAKY_SLOW") and "SAFELAUNCH_RERUN" in os.environ
            time.sleep(5 if slow else 0.1)
    print(f"rank {rank} trained {steps} steps on {dist.get_backend()}")
    del model
    dist.destroy_process_group()


main()
