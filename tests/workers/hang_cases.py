"""Gloo ranks that hang in one of several ways; CASE picks it, rank 1 is the culprit.

skip: rank 1 skips one all_reduce, then waits in a barrier while the others wait in all_reduce
sleep: rank 1 sleeps in load_next_batch while the others wait in all_reduce
stop: rank 1 SIGSTOPs itself
gil: rank 1 blocks in native code that holds the GIL
Each writes the wall-clock time its hang began to $PIDS_DIR/hang_start.
"""

import ctypes
import os
import signal
import time
from datetime import timedelta

import torch
import torch.distributed as dist

CASE = os.environ["CASE"]
HANG_AT = 3


def mark_hang_start():
    with open(os.path.join(os.environ["PIDS_DIR"], "hang_start"), "w") as out:
        out.write(str(time.time()))


def load_next_batch(step):
    if CASE == "sleep" and dist.get_rank() == 1 and step == HANG_AT:
        mark_hang_start()
        time.sleep(3600)
    return torch.ones(4)


def main():
    dist.init_process_group("gloo", timeout=timedelta(minutes=30))
    rank = dist.get_rank()
    for step in range(6):
        batch = load_next_batch(step)
        if rank == 1 and step == HANG_AT:
            if CASE == "skip":
                mark_hang_start()
                continue
            if CASE == "stop":
                mark_hang_start()
                os.kill(os.getpid(), signal.SIGSTOP)
            if CASE == "gil":
                mark_hang_start()
                ctypes.PyDLL(None).sleep(3600)  # PyDLL keeps the GIL during the call
        dist.all_reduce(batch)
    dist.barrier()
    dist.destroy_process_group()


main()
