"""Gloo ranks whose calls go wrong in one way each; CASE picks how.

cycle: 3 ranks in a p2p ring, every rank receives from the one before it first (a
       program deadlock: nobody sends); rank 0 with irecv().wait(), the others recv
size: 5 ranks; in new_group([1, 2, 3, 4]) rank 3 calls all_reduce with another size at
      step 2
skip: 3 ranks; rank 1 skips the all_reduce of step 2, so it ends one short and exits
      while its peers wait in their last: their Gloo errors name it by address only
"""

import os

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


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    {"cycle": cycle, "size": size, "skip": skip}[CASE](rank, world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
