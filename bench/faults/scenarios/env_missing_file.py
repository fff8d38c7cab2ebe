"""The dataset path is relative and the job runs from another directory."""

import torch.distributed as dist

dist.init_process_group("gloo")
with open("data/train_shard_0.bin", "rb") as shard:  # FAULT
    shard.read()
