"""Rank 1 dies abruptly in the middle of the all-reduces; the others are left mid-collective."""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
for step in range(1000):
    if dist.get_rank() == 1 and step == 20:
        os._exit(3)
    dist.all_reduce(torch.ones(1 << 16))
    time.sleep(0.005)
