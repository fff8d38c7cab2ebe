"""NaN in backward with anomaly detection on (sqrt of a negative value)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.autograd.set_detect_anomaly(True)
weight = torch.tensor([1.0, -2.0], requires_grad=True)
loss = torch.sqrt(weight).sum()
loss.backward()  # FAULT
