"""Accuracy over an empty evaluation shard on the last rank."""

import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
correct = total = 0
for sample in range(10)[rank * 10 : (rank + 1) * 10]:  # 10 samples: the last rank has none
    total += 1
    correct += sample % 2
accuracy = correct / total  # FAULT
dist.barrier()
