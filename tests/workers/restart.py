"""Fails (rank 1) until TORCHELASTIC_RESTART_COUNT reaches SUCCEED_AT."""

import os
import sys

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"attempt {attempt} max {os.environ['TORCHELASTIC_MAX_RESTARTS']}")
if attempt < int(os.environ.get("SUCCEED_AT", "2")) and os.environ["RANK"] == "1":
    sys.exit(5)
