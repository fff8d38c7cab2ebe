"""Rank 0 deadlocks on a lock its own logging thread holds; rank 1 waits in all_reduce."""

import threading
import time

import torch
import torch.distributed as dist

lock = threading.Lock()


def flush_metrics() -> None:
    with lock:
        time.sleep(3600)


dist.init_process_group("gloo")
for step in range(10):
    if dist.get_rank() == 0 and step == 2:
        threading.Thread(target=flush_metrics, daemon=True).start()
        time.sleep(0.2)
        with lock:  # FAULT
            pass
    dist.all_reduce(torch.ones(8))
