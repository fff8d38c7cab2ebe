"""Two Gloo ranks; rank 1 asks cuda:0 for 4 TiB (more than any GPU has) while rank 0 waits.

Expected from safelaunch: rank 1, cuda-out-of-memory (resources), no Gloo rerun.
"""

import torch
import torch.distributed as dist


def build_activations(rank):
    if rank == 1:
        return torch.empty(1 << 42, dtype=torch.uint8, device="cuda:0")
    return None


dist.init_process_group("gloo")
rank = dist.get_rank()
dist.barrier()
build_activations(rank)
dist.barrier()
dist.destroy_process_group()
