"""A dependency missing on the machine (accelerate/DeepSpeed reports: 'No module named ...')."""

import fused_adam_kernels  # noqa: F401  # FAULT: not installed where the ranks run
import torch.distributed as dist

dist.init_process_group("gloo")
