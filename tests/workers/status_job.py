"""A small DDP job that trains until told to stop, for `safelaunch status` tests.

Each step: a forward/backward and an SGD step (the optimizer steps status infers), and
safelaunch.heartbeat(step=) when EXPLICIT=1. STALL_RANK: that rank stays in
load_next_batch at step 3 (a straggler; the others wait in the gradient all-reduce),
printing until $PIDS_DIR/release appears, then silent (a hang).
FAIL_RANK: that rank raises at step 3. $PIDS_DIR/ready-<rank> appears after step 2;
the job ends at the step after $PIDS_DIR/stop appears.
"""

import os
import sys
import time

import torch
import torch.distributed as dist

import safelaunch

rank = os.environ["RANK"]
pids = os.environ["PIDS_DIR"]
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def load_next_batch(step: int) -> torch.Tensor:
    if os.environ.get("STALL_RANK") == rank and step == 3:
        # A loader that says it waits (its output is progress: no hang yet) until the test
        # has looked, then goes silent for good (the hang).
        while not os.path.exists(os.path.join(pids, "release")):
            print("waiting for shard 3", flush=True)
            time.sleep(0.5)
        time.sleep(3600)  # a data loader that never returns
    if os.environ.get("FAIL_RANK") == rank and step == 3:
        raise RuntimeError(f"rank {rank} cannot read shard {step}")
    return torch.ones(8, 4)


step = 0
while not os.path.exists(os.path.join(pids, "stop")):
    optimizer.zero_grad()
    model(load_next_batch(step)).sum().backward()
    optimizer.step()
    if os.environ.get("EXPLICIT") == "1":
        safelaunch.heartbeat(step=step)
    if step == 2:
        open(os.path.join(pids, f"ready-{rank}"), "w").close()
    time.sleep(0.05)
    step += 1
dist.barrier()
sys.stdout.flush()
os._exit(0)  # without Gloo's teardown race (see multinode.py)
