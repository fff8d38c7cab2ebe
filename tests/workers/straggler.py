"""Ranks that train STEPS steps of load_batch + forward + all_reduce; CASE picks the slow one.

balanced: every rank alike; data: rank 1's load_batch takes 30% longer; compute: rank 1's
forward takes longer. Both phases sleep (not spin): on a shared 2-core machine a spinning
rank's pace is the scheduler's, and the test is of the measurement, not of the CPU.
"""

import os
import time

import torch
import torch.distributed as dist

CASE = os.environ.get("CASE", "balanced")
STEPS = 32
LOAD, FORWARD = 0.15, 0.05


def load_batch(rank):
    time.sleep(LOAD * (1.3 if CASE == "data" and rank == 1 else 1.0))
    return torch.ones(16)


def forward(rank, batch):
    time.sleep(FORWARD * (2.5 if CASE == "compute" and rank == 1 else 1.0))
    return batch * 2


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for _ in range(STEPS):
        grad = forward(rank, load_batch(rank))
        dist.all_reduce(grad)
    dist.destroy_process_group()


main()
