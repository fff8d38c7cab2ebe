"""Ranks issue collectives in a different order (rank 1 broadcasts first)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
stats = torch.ones(16)
flag = torch.zeros(2)
if rank == 1:
    dist.broadcast(flag, src=0)  # FAULT: rank 0 all-reduces first
    dist.all_reduce(stats)
else:
    dist.all_reduce(stats)
    dist.broadcast(flag, src=0)
dist.destroy_process_group()
