"""Gloo ranks that stop taking part in different ways; CASE picks how (2 ranks each).

destroyed: rank 1 destroys the default group after its 2nd step, works on locally for 8 s
           and would then return; rank 0 goes on with all_reduce (dies of a reset peer)
short: rank 1's shard has fewer batches; its train() returns and it waits in the barrier
       after it while rank 0 is still in train()'s all_reduce (a hang)
exit: rank 1 prints an error of its own and calls sys.exit(4) while rank 0 communicates
"""

import os
import sys
import time

import torch
import torch.distributed as dist

CASE = os.environ["CASE"]


def destroyed(rank):
    for step in range(8):
        if rank == 1 and step == 2:
            dist.destroy_process_group()
            time.sleep(8)  # local post-processing
            return
        dist.all_reduce(torch.ones(32))


def train(batches):
    for batch in batches:
        dist.all_reduce(batch)


def short(rank):
    batches = [torch.ones(16) for _ in range(12 if rank == 0 else 9)]
    train(batches)
    dist.barrier()


def load_index(rank):
    if rank == 1:
        print("loading the shard index", flush=True)
        print("error: could not open shard index /nonexistent/index.json", file=sys.stderr)
        sys.exit(4)


def exits(rank):
    dist.all_reduce(torch.ones(4))
    load_index(rank)
    for _ in range(20):
        dist.all_reduce(torch.ones(4))
        time.sleep(0.1)


dist.init_process_group("gloo")
{"destroyed": destroyed, "short": short, "exit": exits}[CASE](dist.get_rank())
if dist.is_initialized():
    dist.destroy_process_group()
