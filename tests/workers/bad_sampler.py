"""Builds a DataLoader with both a sampler and shuffle=True (rank 1 only; rank 0 exits)."""

import os

if os.environ["RANK"] == "1":  # rank 0 has nothing to do: no torch import to pay (~1.3 s)
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    dataset = TensorDataset(torch.arange(8.0))
    sampler = DistributedSampler(dataset, num_replicas=2, rank=1)
    DataLoader(dataset, sampler=sampler, shuffle=True)
