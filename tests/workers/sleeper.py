"""Every rank records its pid, prints a line and sleeps; IGNORE_TERM=1 ignores SIGTERM."""

import os
import signal
import time

if os.environ.get("IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(os.path.join(os.environ["PIDS_DIR"], f"rank{os.environ['RANK']}"), "w") as out:
    out.write(f"{os.getpid()}\n")
print("ready", flush=True)
time.sleep(120)
