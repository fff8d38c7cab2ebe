"""world_size hard-coded in the script (4) while launched with 2 ranks."""

import datetime
import os

import torch.distributed as dist

dist.init_process_group(  # FAULT
    "gloo",
    rank=int(os.environ["RANK"]),
    world_size=4,
    timeout=datetime.timedelta(seconds=8),
)
