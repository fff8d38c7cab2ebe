"""One rank breaks out of its loop on a local condition and returns without the others."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(40):
    batch = torch.rand(8)
    if rank == 0 and step == 12:
        break  # FAULT: a local 'no more data' check
    dist.all_reduce(batch)
print(f"rank {rank} finished training")
