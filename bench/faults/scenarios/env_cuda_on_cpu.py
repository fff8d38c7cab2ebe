"""A GPU script on a CPU-only torch build: .cuda() on a model."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.Linear(4, 4)
model = model.cuda()  # FAULT
