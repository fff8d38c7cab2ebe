"""Each rank prints LINES lines, one write at a time; then rank FAIL_RANK raises.

The small pauses make every line its own read in the launcher (many console
entries), as a chatty training loop does. The failing rank raises once every rank
has written all its lines ($PIDS_DIR/flooded-<rank>), so every log must hold them all.
"""

import os
import time

rank = os.environ["RANK"]
count = int(os.environ.get("LINES", "1200"))
for i in range(count):
    os.write(1, f"r{rank} line {i:05d} {'x' * 80}\n".encode())
    time.sleep(0.003)
open(os.path.join(os.environ["PIDS_DIR"], f"flooded-{rank}"), "w").close()


def save_checkpoint():
    raise RuntimeError(f"rank {rank} could not write checkpoint shard 3")


if rank == os.environ.get("FAIL_RANK", "0"):
    world = int(os.environ["WORLD_SIZE"])
    deadline = time.time() + 60
    while time.time() < deadline and len(os.listdir(os.environ["PIDS_DIR"])) < world:
        time.sleep(0.05)
    save_checkpoint()
