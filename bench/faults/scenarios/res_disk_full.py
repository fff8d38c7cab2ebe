"""Rank 0 saves a checkpoint onto a full disk (/dev/full answers ENOSPC)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    torch.save({"weights": torch.rand(1 << 16)}, "/dev/full")  # FAULT
dist.barrier()
