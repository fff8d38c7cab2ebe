"""Variable-length samples with the default collate (no padding)."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

dist.init_process_group("gloo")
samples = [torch.ones(3 + i % 4) for i in range(16)]
for batch in DataLoader(samples, batch_size=4):  # FAULT
    dist.all_reduce(batch.sum().reshape(1))
