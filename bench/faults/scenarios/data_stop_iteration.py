"""A fixed number of steps with next() on the loader; rank 1's shard is shorter."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
rank = dist.get_rank()
loader = DataLoader(TensorDataset(torch.arange(40.0 if rank == 0 else 24.0)), batch_size=4)
batches = iter(loader)
for _step in range(10):
    (x,) = next(batches)  # FAULT
    dist.all_reduce(x.sum().reshape(1))
