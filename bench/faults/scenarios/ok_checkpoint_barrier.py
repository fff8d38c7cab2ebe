"""No fault: rank 0 writes a checkpoint for longer than the hang timeout; the others wait."""

import os
import tempfile
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(4))
if dist.get_rank() == 0:
    deadline = time.monotonic() + 9
    with tempfile.TemporaryFile() as checkpoint:
        while time.monotonic() < deadline:
            checkpoint.write(os.urandom(1 << 16))  # serialising and writing a big state dict
            checkpoint.seek(0)
dist.barrier()
dist.destroy_process_group()
