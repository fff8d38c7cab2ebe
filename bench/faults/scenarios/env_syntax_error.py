"""A syntax error in the entry script: every rank would die on it."""

import torch.distributed as dist

dist.init_process_group("gloo")
for step in range(3)  # FAULT
    dist.barrier()
