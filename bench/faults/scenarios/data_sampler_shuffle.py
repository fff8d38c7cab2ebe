"""DataLoader given a DistributedSampler and shuffle=True."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
dataset = TensorDataset(torch.arange(64.0))
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, sampler=sampler, shuffle=True)  # FAULT
