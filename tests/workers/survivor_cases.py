"""Rank $FAIL raises while the others are busy elsewhere; CASE picks what they do.

subgroup: every other rank waits in an all_reduce of a group without rank $FAIL, except
  rank $SLOW, which sleeps in load_next_batch (the others wait for it there)
"""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

FAIL = int(os.environ["FAIL"])
SLOW = int(os.environ["SLOW"])
FAIL_AT = 3


def load_next_batch(rank, step):
    if rank == SLOW and step == FAIL_AT:
        time.sleep(3600)
    return torch.ones(4)


def step(rank, number):
    if rank == FAIL and number == FAIL_AT:
        time.sleep(0.5)  # the others are in place by now
        raise ValueError(f"rank {rank} fails at step {number}")


def main():
    dist.init_process_group("gloo", timeout=timedelta(minutes=5))
    rank, world = dist.get_rank(), dist.get_world_size()
    others = dist.new_group([r for r in range(world) if r != FAIL])
    for number in range(6):
        step(rank, number)
        if rank == FAIL:
            continue
        batch = load_next_batch(rank, number)
        dist.all_reduce(batch, group=others)
    dist.destroy_process_group()


main()
