"""Gloo ranks where the first rank to fail is not the one that broke the job.

CASE picks the fault, CULPRIT the rank that commits it, at step STEP:
size:  the culprit calls all_reduce with one element more; a peer's Gloo enforce trips first
sleep: the culprit sleeps past the group's timeout before the collective; its peers time
       out waiting for it and fail first
"""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

CASE = os.environ["CASE"]
CULPRIT = int(os.environ["CULPRIT"])
STEP = int(os.environ.get("STEP", "2"))
TIMEOUT = 2.0


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    rank = dist.get_rank()
    for step in range(STEP + 3):
        odd = rank == CULPRIT and step == STEP
        if CASE == "sleep" and odd:
            time.sleep(60)  # the fault: long past the timeout, whatever the load
        batch = torch.ones(5 if CASE == "size" and odd else 4)  # the fault
        dist.all_reduce(batch)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
