"""Rank $STUCK's DataLoader worker blocks in __getitem__; the rank waits for it in the
DataLoader while the others wait in all_reduce."""

import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

STUCK = int(os.environ["STUCK"])


class Shards(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        if dist.get_rank() == STUCK and index >= 8:
            time.sleep(3600)  # a read that never returns
        return torch.ones(4)


def main():
    dist.init_process_group("gloo")
    for batch in DataLoader(Shards(), batch_size=4, num_workers=1):
        dist.all_reduce(batch)
    dist.destroy_process_group()


main()
