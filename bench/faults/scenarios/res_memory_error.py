"""A host-side buffer sized from a config value that is far too large."""

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    cache = bytearray(1 << 47)  # FAULT
dist.barrier()
