"""A DataLoader worker dies (killed: OOM killer, segfault in a decoder) on rank 1."""

import os
import signal

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        if os.environ["RANK"] == "1" and index == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.tensor(float(index))


dist.init_process_group("gloo")
for batch in DataLoader(Images(), batch_size=4, num_workers=2):  # FAULT
    dist.all_reduce(batch)
