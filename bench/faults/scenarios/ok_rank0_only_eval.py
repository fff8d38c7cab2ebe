"""No fault: rank 0 evaluates alone between epochs and the others wait in a barrier."""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
for _epoch in range(2):
    dist.all_reduce(torch.ones(64))
    if dist.get_rank() == 0:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            torch.rand(64, 64) @ torch.rand(64, 64)
    dist.barrier()
dist.destroy_process_group()
