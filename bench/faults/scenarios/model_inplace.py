"""An in-place update of a tensor autograd still needs."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
x = torch.rand(4, requires_grad=True)
y = x.sigmoid()
y.mul_(2)
y.sum().backward()  # FAULT
