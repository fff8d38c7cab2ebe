"""Rank 1 all-reduces a tensor of another size (a model with a rank-dependent buffer)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(5):
    size = 8 if rank == 1 and step == 3 else 4
    grads = torch.ones(size)
    dist.all_reduce(grads)  # FAULT (rank 1's tensor is larger at step 3)
dist.destroy_process_group()
