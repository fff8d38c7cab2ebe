"""A bad sample in rank 1's shard: the dataset raises inside a DataLoader worker."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.rank == 1 and index == 37:
            raise ValueError(f"record {index}: label -1 out of range")  # FAULT
        return torch.tensor(float(index))


dist.init_process_group("gloo")
for batch in DataLoader(Records(dist.get_rank()), batch_size=4, num_workers=2):
    dist.all_reduce(batch)
