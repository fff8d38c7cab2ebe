"""Holds GIB GiB on cuda:0 (plain allocations, no managed memory) until killed; says when.

Usage: hold_memory.py GIB SECONDS. The acceptance check runs `safelaunch doctor` meanwhile.
"""

import sys
import time

import torch

held = torch.empty(int(float(sys.argv[1]) * (1 << 30)), dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info(0)
print(f"holding {held.numel() >> 20} MiB; {free >> 20} of {total >> 20} MiB free", flush=True)
time.sleep(float(sys.argv[2]))
