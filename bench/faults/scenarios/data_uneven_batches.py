"""Each rank iterates its own shard; rank 1's is shorter (no DistributedSampler, no drop_last)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
shard = range(40 if rank == 0 else 30)  # FAULT: samples per rank differ
for _start in range(0, len(shard), 4):
    grads = torch.ones(256)
    dist.all_reduce(grads)  # rank 1 runs out of batches first and leaves
print(f"rank {rank} done")
