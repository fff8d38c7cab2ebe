"""Builds a DataLoader with both a sampler and shuffle=True (rank 1 only)."""

import os

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dataset = TensorDataset(torch.arange(8.0))
if os.environ["RANK"] == "1":
    sampler = DistributedSampler(dataset, num_replicas=2, rank=1)
    DataLoader(dataset, sampler=sampler, shuffle=True)
