"""Rank 1 kills itself with signal SIG (KILL or SEGV via a real null dereference)."""

import ctypes
import os
import signal
import time

if os.environ["RANK"] == "1":
    time.sleep(0.2)
    if os.environ.get("SIG", "KILL") == "SEGV":
        ctypes.string_at(0)  # a real segfault in native code
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
