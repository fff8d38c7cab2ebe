"""Each rank prints LINES lines, one write at a time, then rank FAIL_RANK raises.

The small pauses make every line its own read in the launcher (many console
entries), as a chatty training loop does.
"""

import os
import time

rank = os.environ["RANK"]
count = int(os.environ.get("LINES", "1200"))
for i in range(count):
    os.write(1, f"r{rank} line {i:05d} {'x' * 80}\n".encode())
    time.sleep(0.003)


def save_checkpoint():
    raise RuntimeError(f"rank {rank} could not write checkpoint shard 3")


if rank == os.environ.get("FAIL_RANK", "0"):
    save_checkpoint()
