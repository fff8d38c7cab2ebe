"""Trains (an SGD step and an all_reduce per step) until $PIDS_DIR/stop appears, for the
--metrics-port scrape. $PIDS_DIR/ready-<rank> appears after step 2."""

import os
import sys
import time

import torch
import torch.distributed as dist

rank = os.environ["RANK"]
pids = os.environ["PIDS_DIR"]
dist.init_process_group("gloo")
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
stop = torch.zeros(1)
while True:
    # every rank stops at the same step: one that saw the file a step before the other
    # waited in the barrier below while the other all-reduced (a hang; CI, once)
    stop.fill_(float(os.path.exists(os.path.join(pids, "stop"))))
    dist.all_reduce(stop)
    if stop.item() > 0:
        break
    optimizer.zero_grad()
    model(torch.ones(8, 4)).sum().backward()
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
    optimizer.step()
    if step == 2:
        open(os.path.join(pids, f"ready-{rank}"), "w").close()
    time.sleep(0.05)
    step += 1
dist.barrier()
sys.stdout.flush()
os._exit(0)  # without Gloo's teardown race (see multinode.py)
