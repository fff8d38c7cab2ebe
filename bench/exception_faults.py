"""Generated exception faults, scored: % unknown and class agreement with the ground truth.

    .venv/bin/python bench/exception_faults.py [--count 300] [--seed 25]

Runs tests/exception_faults.py twice (the fixed seed, then a random one) and classifies
every fault through diagnose(), as a launch does with a failed rank's log. Prints, per
run: % unknown (target <= 5%), % agreement (target >= 90%), what decided the classes
(message signatures, the traceback's layers, exception types), the misses by kind, and
the same faults classified without the layers (as before they existed).
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).parents[1] / "tests"
sys.path.insert(0, str(TESTS))

import exception_faults  # noqa: E402


def run(seed: int, count: int) -> None:
    with tempfile.TemporaryDirectory() as out:
        started = time.monotonic()
        command = [sys.executable, str(TESTS / "exception_faults.py"), out]
        command += ["--seed", str(seed), "--count", str(count)]
        subprocess.run(command, check=True, capture_output=True)
        generated = time.monotonic() - started
        faults = exception_faults.read_faults(Path(out))
        started = time.monotonic()
        score = exception_faults.score(faults)
        classified = time.monotonic() - started
        with exception_faults.without_layers():
            before = exception_faults.score(faults)
    kinds = len({f["kind"] for f in faults})
    print(f"seed {seed}: {score['count']} faults of {kinds} kinds ", end="")
    print(f"(generated in {generated:.1f} s, classified in {classified:.1f} s)")
    print(f"  unknown:   {score['unknown']:.1f}% (target <= 5%)")
    print(f"  agreement: {score['agreement']:.1f}% (target >= 90%)")
    print(f"  decided by: {score['decided_by']}")
    print("  without the layers (signatures, then exception types): unknown ", end="")
    print(f"{before['unknown']:.1f}%, agreement {before['agreement']:.1f}%")
    misses = score["misses"]
    assert isinstance(misses, dict)
    for kind, seen in sorted(misses.items()):
        print(f"  miss {kind}: {len(seen)} x {sorted(set(seen))}")
    if not misses:
        print("  misses: none")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=25)
    args = parser.parse_args()
    run(args.seed, args.count)
    run(random.randrange(1 << 30), args.count)


if __name__ == "__main__":
    main()
