"""Every rank finishes its script; rank $LINGER leaves a non-daemon thread that waits for
work that never comes, so its process cannot exit. WHEN=raise: rank $LINGER raises instead."""

import os
import queue
import threading

import torch
import torch.distributed as dist

work = queue.Queue()


def save():
    while True:
        item = work.get()
        print(item)


def main():
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(4))
    dist.barrier()
    dist.destroy_process_group()
    if dist.is_available() and int(os.environ["RANK"]) == int(os.environ["LINGER"]):
        threading.Thread(target=save, name="saver").start()
        if os.environ.get("WHEN") == "raise":
            raise RuntimeError("the script fails after starting its saver")


main()
