"""Each rank prints LINES numbered lines, half to stdout, half to stderr, interleaved."""

import os
import sys

rank = os.environ["RANK"]
count = int(os.environ.get("LINES", "100000"))
pad = "x" * 40
out, err = sys.stdout, sys.stderr
for i in range(count):
    stream = out if i % 2 == 0 else err
    stream.write(f"r{rank} {i:07d} {pad}\n")
