"""A DDP model with a branch that is not used in the loss (find_unused_parameters unset)."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = torch.nn.Linear(4, 4)
        self.aux_head = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


dist.init_process_group("gloo")
model = DDP(Net())
for _step in range(3):
    model(torch.rand(2, 4)).sum().backward()  # FAULT (second step)
