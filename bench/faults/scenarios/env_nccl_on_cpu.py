"""A script written for GPUs run on a CPU-only torch: backend='nccl'."""

import torch.distributed as dist

dist.init_process_group("nccl")  # FAULT
