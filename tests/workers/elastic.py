"""A DDP job for elastic membership. A group trains until the launcher stops it (a node
killed, a node admitted), except the one that ends: by default any restart's; with
FINISH_AT=<restart count>:<world size>, that group's. The group that ends trains STEPS
steps. $PIDS_DIR/ready-<count>-<world>-<rank> appears once a rank of a group has trained
a step (and ready-<rank> for attempt 0's)."""

import os
import sys
import time

import torch
import torch.distributed as dist

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = os.environ["RANK"]
world = int(os.environ["WORLD_SIZE"])
finish = os.environ.get("FINISH_AT")
ends = f"{attempt}:{world}" == finish if finish else attempt > 0
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
step = 0
while not ends or step < int(os.environ.get("STEPS", "3")):
    model(torch.ones(8, 4)).sum().backward()
    if step == 0:
        pids = os.environ["PIDS_DIR"]
        open(os.path.join(pids, f"ready-{attempt}-{world}-{rank}"), "w").close()
        if attempt == 0:
            open(os.path.join(pids, f"ready-{rank}"), "w").close()
    time.sleep(0.1)
    step += 1
print(f"attempt {attempt}: rank {rank} of {world} trained {step} steps")
dist.barrier()
sys.stdout.flush()
os._exit(0)  # not Gloo's teardown: its exit race is not what these tests are about
