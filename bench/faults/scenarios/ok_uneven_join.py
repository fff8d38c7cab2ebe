"""No fault: uneven inputs handled with the Join context manager (DDP)."""

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(4, 1))
with Join([model]):
    for _step in range(10 if rank == 0 else 6):
        model(torch.rand(2, 4)).sum().backward()
dist.destroy_process_group()
