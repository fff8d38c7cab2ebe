"""DDP over a model whose second layer never takes part in the loss."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(4, 1)
        self.unused = nn.Linear(4, 1)

    def forward(self, x):
        return self.used(x)


model = DistributedDataParallel(TwoHeads())
for _ in range(3):
    model(torch.randn(2, 4)).sum().backward()
