"""The input size changed in the data pipeline but not in the model."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.Linear(128, 10)
batch = torch.rand(8, 256)
loss = model(batch).sum()  # FAULT
