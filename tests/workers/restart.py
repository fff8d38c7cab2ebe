"""Fails (rank 1) until TORCHELASTIC_RESTART_COUNT reaches SUCCEED_AT."""

import os
import sys
import time

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"attempt {attempt} max {os.environ['TORCHELASTIC_MAX_RESTARTS']}")
if attempt < int(os.environ.get("SUCCEED_AT", "2")) and os.environ["RANK"] == "1":
    time.sleep(0.5)  # fail after rank 0 has printed: it is stopped as soon as rank 1 fails
    sys.exit(5)
