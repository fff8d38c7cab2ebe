"""A tiny Gloo job for multi-node tests; prints what torchrun's rank assignment gave it.

FAIL_RANK: that rank raises in the first attempt. HANG_RANK: that rank sleeps at step 2.
FOREVER: keep training (a node is killed meanwhile). LATE_RANK: that rank works LATE_SECONDS
longer than the others after the last barrier (a final save). IDLE: after its first step a rank
sleeps, in no collective (a peer that vanishes does not fail it). $PIDS_DIR/ready-<rank> appears
once a rank has trained a step.
"""

import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

env = {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE")}
dist.init_process_group("gloo")
model = torch.nn.Linear(4, 2)  # not DDP: its constructor imports torch._dynamo, ~1.25 CPU-s
step = 0
while step < 3 or os.environ.get("FOREVER"):
    if os.environ.get("HANG_RANK") == env["RANK"] and step == 2:
        time.sleep(3600)  # load_next_batch never returns
    model(torch.ones(8, 4)).sum().backward()
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
    if step == 0:
        open(os.path.join(os.environ["PIDS_DIR"], f"ready-{env['RANK']}"), "w").close()
        if os.environ.get("IDLE"):
            time.sleep(3600)
    if os.environ.get("FOREVER"):
        time.sleep(0.1)
    step += 1
first_attempt = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
if os.environ.get("FAIL_RANK") == env["RANK"] and first_attempt:
    try:
        raise RuntimeError(f"rank {env['RANK']} broke")
    except RuntimeError:
        traceback.print_exc()  # the traceback, then exit 1 without Gloo's teardown (below)
        sys.stderr.flush()
        os._exit(1)
print("trained", " ".join(f"{k}={v}" for k, v in env.items()), f"world={dist.get_world_size()}")
dist.barrier()
if os.environ.get("LATE_RANK") == env["RANK"]:  # rank 0 alone saves or evaluates at the end
    time.sleep(float(os.environ["LATE_SECONDS"]))
    print(f"saved after {os.environ['LATE_SECONDS']} s more")
# Not destroy_process_group: Gloo's teardown sometimes aborts a rank after all the work
# is done (a torch race, diagnosed as shutdown-crash elsewhere); these tests are about
# the nodes, so every rank leaves without it once all have passed the barrier.
sys.stdout.flush()
os._exit(0)
