"""No fault: every rank logs a lot (per-step debug prints, progress bars)."""

import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
for step in range(200):
    for line in range(250):
        print(f"step {step} line {line} loss 0.{line:04d}")
    sys.stderr.write(f"\rprogress {step}/200")
    dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
