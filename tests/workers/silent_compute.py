"""A healthy rank that computes in Python for SECONDS without printing or communicating."""

import os
import time

end = time.time() + float(os.environ.get("SECONDS_BUSY", "6"))
total = 0
while time.time() < end:
    total += sum(i * i for i in range(20_000))
print("done", total > 0)
