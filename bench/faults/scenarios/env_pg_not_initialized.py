"""A collective before init_process_group (the init is behind a flag that was not set)."""

import os

import torch
import torch.distributed as dist

if os.environ.get("USE_DDP_INIT") == "1":
    dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))  # FAULT
