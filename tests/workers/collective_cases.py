"""Gloo ranks whose collectives diverge; CASE picks how (all hang, except `fail`).

subgroup: 3 ranks; rank 2 sleeps in load_shard instead of the all_reduce on new_group([1,2])
groups: 4 ranks, new_subgroups(2): in [0,1] rank 1 calls broadcast where rank 0 calls
        all_reduce; in [2,3] both ranks send to each other (send/send)
batch: 2 ranks; each posts only an irecv from the other with batch_isend_irecv (recv/recv)
fail: 2 ranks; rank 1 raises instead of the second all_reduce, rank 0 waits in it
"""

import os
import time

import torch
import torch.distributed as dist

CASE = os.environ["CASE"]


def load_shard(rank, step):
    if CASE == "subgroup" and rank == 2 and step == 2:
        time.sleep(3600)
    return torch.ones(1024)


def subgroup(rank):
    pair = dist.new_group([1, 2])
    for step in range(4):
        dist.all_reduce(torch.ones(4))
        if rank in (1, 2):
            shard = load_shard(rank, step)
            dist.all_reduce(shard, group=pair)


def groups(rank):
    mine, _ = dist.new_subgroups(group_size=2)
    dist.all_reduce(torch.ones(4))
    if rank == 0:
        dist.all_reduce(torch.ones(8), group=mine)
    elif rank == 1:
        dist.broadcast(torch.ones(8), src=0, group=mine)
    else:
        dist.send(torch.ones(1 << 16), dst=5 - rank)  # 2 -> 3, 3 -> 2
        dist.recv(torch.ones(1 << 16), src=5 - rank)


def batch(rank):
    dist.all_reduce(torch.ones(4))
    works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, torch.ones(8), 1 - rank)])
    for work in works:
        work.wait()


def fail(rank):
    dist.all_reduce(torch.ones(4))
    if rank == 1:
        raise ValueError("bad shard")
    dist.all_reduce(torch.ones(16))


def main():
    dist.init_process_group("gloo")
    {"subgroup": subgroup, "groups": groups, "batch": batch, "fail": fail}[CASE](dist.get_rank())
    dist.destroy_process_group()


main()
