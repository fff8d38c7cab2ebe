"""Rank FAIL_RANK (default 1) raises after FAIL_AFTER seconds; the others wait long."""

import os
import time


def load_batch():
    raise RuntimeError(f"rank {os.environ['RANK']} cannot read shard 7")


if os.environ["RANK"] == os.environ.get("FAIL_RANK", "1"):
    time.sleep(float(os.environ.get("FAIL_AFTER", "0.3")))
    load_batch()
time.sleep(60)
