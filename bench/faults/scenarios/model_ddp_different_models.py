"""Rank 1 builds a wider model (a size derived from a rank-local config)."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
hidden = 32 if dist.get_rank() == 1 else 16
model = DDP(torch.nn.Linear(8, hidden))  # FAULT
