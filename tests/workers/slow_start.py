"""Rank 0 spends START_SECONDS in Python before joining; rank 1 waits in the rendezvous."""

import os
import time

import torch.distributed as dist

if os.environ["RANK"] == "0":
    end = time.time() + float(os.environ.get("START_SECONDS", "5"))
    while time.time() < end:
        sorted(range(50_000), key=lambda i: -i)
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
print("joined")
