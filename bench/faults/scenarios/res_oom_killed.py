"""The kernel's OOM killer takes rank 1 mid-training (SIGKILL)."""

import os
import signal

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
for step in range(50):
    if dist.get_rank() == 1 and step == 10:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(1024))
