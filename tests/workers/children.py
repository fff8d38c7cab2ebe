"""Each rank starts children that try to outlive it, then rank 1 fails (or all succeed).

MODE=fail: rank 1 raises; MODE=ok: every rank exits 0 leaving its children running;
MODE=hold: every rank keeps running (for tests that signal the launcher).
Children: one in the rank's group that ignores SIGTERM, one in its own session
(setsid), both sleeping for a minute. Their pids go to $PIDS_DIR.
"""

import os
import subprocess
import sys
import time

CHILD = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
rank = os.environ["RANK"]
stubborn = subprocess.Popen([sys.executable, "-c", CHILD])
own_session = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
)
with open(os.path.join(os.environ["PIDS_DIR"], f"rank{rank}"), "w") as out:
    out.write(f"{os.getpid()} {stubborn.pid} {own_session.pid}\n")
time.sleep(0.5)  # let the children install their handlers
mode = os.environ.get("MODE", "fail")
print("ready", flush=True)
if mode == "hold":
    time.sleep(120)
if mode == "fail":
    if rank == "1":
        raise RuntimeError("rank 1 fails, leaving children behind")
    time.sleep(60)
print(f"rank {rank} done", flush=True)
