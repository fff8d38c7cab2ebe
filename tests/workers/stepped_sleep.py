"""Sleeps in short native calls; reports each step with safelaunch.heartbeat when STEPS=1."""

import os
import time

import safelaunch

for step in range(int(os.environ.get("ROUNDS", "20"))):
    time.sleep(0.3)
    if os.environ.get("STEPS") == "1":
        safelaunch.heartbeat(step=step)
print("done")
