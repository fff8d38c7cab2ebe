"""Rank 1 blocks reading its next batch (a stuck NFS read / dead data server)."""

import time

import torch
import torch.distributed as dist


def load_next_batch(rank: int, step: int) -> torch.Tensor:
    if rank == 1 and step == 3:
        time.sleep(3600)  # FAULT
    return torch.ones(16)


dist.init_process_group("gloo")
for step in range(10):
    dist.all_reduce(load_next_batch(dist.get_rank(), step))
