"""A barrier inside `if rank == 0:` (a checkpoint block indented one level too far)."""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
for step in range(3):
    dist.all_reduce(torch.ones(4))
    if dist.get_rank() == 0:
        torch.save({"step": step}, "/dev/null")
        dist.barrier()  # FAULT: only rank 0 reaches it
time.sleep(600)
