"""Asks for NCCL, which a CPU build of torch does not have."""

import torch.distributed as dist

dist.init_process_group("nccl")
