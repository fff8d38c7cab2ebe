"""Rank 1 is stopped (SIGSTOP: a suspended process, a debugger attached and forgotten)."""

import os
import signal

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
for step in range(10):
    if dist.get_rank() == 1 and step == 2:
        os.kill(os.getpid(), signal.SIGSTOP)  # FAULT
    dist.all_reduce(torch.ones(8))
