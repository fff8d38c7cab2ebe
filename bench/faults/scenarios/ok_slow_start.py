"""No fault: rank 1 starts slowly (a slow import / filesystem) before the rendezvous."""

import os
import time

if os.environ["RANK"] == "1":
    time.sleep(9)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
