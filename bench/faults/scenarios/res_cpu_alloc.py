"""A torch allocation larger than the host's memory on rank 1."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    activations = torch.empty(1 << 44)  # FAULT
dist.barrier()
