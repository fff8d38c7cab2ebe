"""Rank 1 spins in a Python loop (a retry loop that never succeeds) while rank 0 waits."""

import torch
import torch.distributed as dist


def fetch_with_retry() -> None:
    attempts = 0
    while True:  # FAULT
        attempts += 1


dist.init_process_group("gloo")
dist.all_reduce(torch.ones(4))
if dist.get_rank() == 1:
    fetch_with_retry()
dist.all_reduce(torch.ones(4))
