"""A segfault in native code (a read of an unmapped address through ctypes) on rank 1."""

import ctypes

import torch.distributed as dist

dist.init_process_group("gloo")


def decode(address: int) -> bytes:
    return ctypes.string_at(address, 8)  # FAULT


if dist.get_rank() == 1:
    decode(16)  # string_at(0) reads without crashing here; page 0 above 0 does not
dist.barrier()
