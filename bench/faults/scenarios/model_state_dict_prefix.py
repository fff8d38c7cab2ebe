"""A checkpoint saved from the DDP wrapper ('module.' prefix) loaded into the bare model."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.Linear(4, 2)
checkpoint = {f"module.{key}": value for key, value in model.state_dict().items()}
model.load_state_dict(checkpoint)  # FAULT
