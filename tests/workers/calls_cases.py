"""Gloo ranks whose calls go wrong in one way each; CASE picks how.

cycle: 3 ranks in a p2p ring, every rank receives from the one before it first (a
       program deadlock: nobody sends); rank 0 with irecv().wait(), the others recv
size: 5 ranks; in new_group([1, 2, 3, 4]) rank 3 calls all_reduce with another size at
      step 2
skip: 3 ranks; rank 1 skips the all_reduce of step 2, so it ends one short and exits
      while its peers wait in their last: their Gloo errors name it by address only
late: 2 ranks, a 3 s group timeout; each step rank 0 isends to rank 1, which irecv()s
      and wait()s, then an all_reduce; at step 2 rank 0 sleeps past the timeout first:
      rank 1's wait raises (its work completed, with an error)
"""

import datetime
import os
import time

import torch
import torch.distributed as dist

CASE = os.environ["CASE"]


def cycle(rank, world):
    dist.all_reduce(torch.ones(2))
    received = torch.zeros(8)
    if rank == 0:
        dist.irecv(received, src=world - 1).wait()
    else:
        dist.recv(received, src=rank - 1)
    dist.send(received, dst=(rank + 1) % world)


def size(rank, world):
    group = dist.new_group([1, 2, 3, 4])
    for step in range(4):
        dist.all_reduce(torch.ones(2))
        if rank in (1, 2, 3, 4):
            n = 16 if rank == 3 and step == 2 else 8
            dist.all_reduce(torch.ones(n), group=group)


def skip(rank, world):
    for step in range(5):
        if rank == 1 and step == 2:
            continue
        dist.all_reduce(torch.ones(4))


def late(rank, world):
    for step in range(4):
        if rank == 0:
            if step == 2:
                time.sleep(30)
            dist.isend(torch.ones(4), dst=1).wait()
        else:
            dist.irecv(torch.zeros(4), src=0).wait()
        dist.all_reduce(torch.ones(2))


def main():
    timeout = datetime.timedelta(seconds=3 if CASE == "late" else 1800)
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    {"cycle": cycle, "size": size, "skip": skip, "late": late}[CASE](rank, world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
