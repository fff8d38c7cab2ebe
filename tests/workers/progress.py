"""Rank 0 draws a progress bar with \\r and no \\n for a while; rank 1 prints whole lines."""

import os
import sys
import time

if os.environ["RANK"] == "0":
    for i in range(30):
        sys.stdout.write(f"\rprogress {i:02d}/30")
        time.sleep(0.02)
    time.sleep(1.5)  # the bar sits unterminated: the console must still show it
    sys.stdout.write("\n")
else:
    for i in range(30):
        print(f"line {i:02d} from rank 1")
        time.sleep(0.02)
