"""A DDP job for elastic membership: attempt 0 trains until a node is killed; later
attempts train STEPS steps on whatever nodes remain, then end. $PIDS_DIR/ready-<rank>
appears once a rank of attempt 0 has trained a step."""

import os
import sys
import time

import torch
import torch.distributed as dist

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = os.environ["RANK"]
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
step = 0
while attempt == 0 or step < int(os.environ.get("STEPS", "3")):
    model(torch.ones(8, 4)).sum().backward()
    if step == 0 and attempt == 0:
        open(os.path.join(os.environ["PIDS_DIR"], f"ready-{rank}"), "w").close()
    time.sleep(0.1)
    step += 1
print(f"attempt {attempt}: rank {rank} of {dist.get_world_size()} trained {step} steps")
dist.barrier()
sys.stdout.flush()
os._exit(0)  # not Gloo's teardown: its exit race is not what these tests are about
