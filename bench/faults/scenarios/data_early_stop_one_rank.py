"""Early stopping decided on the local loss of one rank (Lightning/accelerate issue pattern)."""

import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for epoch in range(50):
    loss = torch.tensor(1.0 / (epoch + 1) + rank)
    dist.all_reduce(torch.ones(64))
    if loss.item() < 0.2:  # only rank 0's local loss gets this low
        print(f"rank {rank}: early stopping at epoch {epoch}")
        sys.exit(0)  # FAULT
