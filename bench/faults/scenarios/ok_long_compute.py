"""No fault: long CPU compute between collectives (longer than the hang timeout)."""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
for _step in range(2):
    deadline = time.monotonic() + 9
    total = 0
    while time.monotonic() < deadline:
        total += sum(range(1000))
    dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
