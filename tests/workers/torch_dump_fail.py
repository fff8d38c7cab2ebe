"""Under torchrun: rank 1 raises instead of the second all_reduce; every rank that fails
writes torch's own flight-recorder dump (the pickle NCCL writes on a timeout with
TORCH_NCCL_DUMP_ON_TIMEOUT, which a CPU build cannot trigger) to TORCH_FR_DUMP_TEMP_FILE<rank>.
"""

import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        dist.all_reduce(torch.ones(4))
        if rank == 1:
            raise ValueError("bad shard")
        dist.all_reduce(torch.ones(16))
    finally:
        with open(f"{os.environ['TORCH_FR_DUMP_TEMP_FILE']}{rank}", "wb") as dump:
            dump.write(torch._C._distributed_c10d._dump_fr_trace(True, False))


main()
