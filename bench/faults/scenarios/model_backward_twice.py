"""A second backward through the same graph (a loss reused for logging)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.Linear(4, 1)
loss = model(torch.rand(3, 4)).pow(2).mean()
loss.backward()
loss.backward()  # FAULT
