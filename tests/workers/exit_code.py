"""Rank 1 exits with EXIT_CODE without a traceback; the others wait."""

import os
import sys
import time

if os.environ["RANK"] == "1":
    time.sleep(0.2)
    sys.exit(int(os.environ.get("EXIT_CODE", "3")))
time.sleep(60)
