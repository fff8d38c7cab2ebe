"""A short collective timeout and one slow rank (rank 1 evaluates; rank 0 times out)."""

import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=4))


def evaluate() -> None:
    time.sleep(12)  # FAULT: longer than the process group's timeout


for step in range(3):
    if dist.get_rank() == 1 and step == 1:
        evaluate()
    dist.all_reduce(torch.ones(4))
