"""new_group called on one rank only (it must be called by every rank): rank 0 waits."""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    group = dist.new_group([0])  # FAULT: rank 1 never calls new_group
dist.all_reduce(torch.ones(1))
time.sleep(600)
