"""Rank 0 waits on child processes while the other ranks wait in a Gloo barrier.

The children stay quiet (no output) but work: one computes for CHILD_SECONDS, the
next writes 256 KiB every 0.2 s for CHILD_SECONDS (a slow upload: I/O, almost no CPU).
Healthy: no rank may be called hung. $PIDS_DIR/children_start appears as the children start.
"""

import os
import subprocess
import sys
from datetime import timedelta

import torch.distributed as dist

SECONDS = os.environ.get("CHILD_SECONDS", "3")
COMPUTE = f"""
import time
end = time.time() + {SECONDS}
while time.time() < end:
    sum(i * i for i in range(10_000))
"""
TRICKLE = f"""
import os, time
end = time.time() + {SECONDS}
with open(os.path.join(os.environ["PIDS_DIR"], "upload.bin"), "wb", buffering=0) as out:
    while time.time() < end:
        out.write(b"u" * 256 * 1024)
        out.seek(0)
        time.sleep(0.2)
"""

dist.init_process_group("gloo", timeout=timedelta(minutes=5))
if dist.get_rank() == 0:
    open(os.path.join(os.environ["PIDS_DIR"], "children_start"), "w").close()
    subprocess.run([sys.executable, "-c", COMPUTE], check=True)
    subprocess.run([sys.executable, "-c", TRICKLE], check=True)
dist.barrier()
dist.destroy_process_group()
print("done")
