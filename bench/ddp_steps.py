"""A DDP step loop that reports its own wall time (used by bench/hang_detection.py)."""

import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

steps = int(sys.argv[1])
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs, targets = torch.randn(64, 256), torch.randn(64, 1)
for _ in range(20):  # warm-up
    nn.functional.mse_loss(model(inputs), targets).backward()
dist.barrier()
start = time.perf_counter()
for _ in range(steps):
    optimizer.zero_grad()
    nn.functional.mse_loss(model(inputs), targets).backward()
    optimizer.step()
dist.barrier()
if dist.get_rank() == 0:
    print(f"LOOP {time.perf_counter() - start:.6f}")
del model, optimizer
dist.destroy_process_group()
