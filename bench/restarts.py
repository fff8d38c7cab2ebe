"""Wall time burned by restarts of a deterministic failure: torchrun 2.13 against safelaunch.

    .venv/bin/python bench/restarts.py [--max-restarts 3] [--nproc 2] [--work 1.0] [--repeat 1]

Each rank imports torch, joins a Gloo group, works `--work` seconds (a stand-in for
loading data and a model), then multiplies tensors of incompatible shapes: torch's own
"mat1 and mat2 shapes cannot be multiplied", the same on every attempt. torchrun restarts
it `--max-restarts` times (every attempt fails alike) and exits 1; safelaunch's default
`--restart-policy auto` stops after the first attempt (signature shape-mismatch) and exits
93. The two launchers take turns; printed: wall time, attempts and exit code of each, and
the ratio safelaunch/torchrun (medians over --repeat). Both run without the Gloo rerun
(`--isolate never`: it is not a restart).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

PYTHON = sys.executable
SAFELAUNCH = [PYTHON, "-m", "safelaunch", "--isolate", "never"]
TORCHRUN = [str(Path(PYTHON).with_name("torchrun"))]
SHAPES = """
import os, sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"attempt {os.environ['TORCHELASTIC_RESTART_COUNT']}", flush=True)
time.sleep(float(sys.argv[1]))
weights = torch.ones(8, 4)
dist.all_reduce(weights)
torch.ones(3, 5) @ weights  # (3x5) @ (8x4): fails the same way on every attempt
"""


class Run(NamedTuple):
    wall: float
    code: int
    attempts: int


def run_once(argv: list[str], where: Path, logs: Path) -> Run:
    """One launch; its attempts are the attempt_N directories it left under `logs`."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=where, capture_output=True, timeout=600)  # never hang
    wall = time.perf_counter() - start
    attempts = sum(1 for p in logs.glob("*/attempt_*") if not p.parent.is_symlink())  # latest
    shutil.rmtree(logs, ignore_errors=True)
    return Run(wall, done.returncode, attempts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-restarts", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--work", type=float, default=1.0, help="seconds each attempt works")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-restarts-") as name:
        where = Path(name)
        (where / "shapes.py").write_text(SHAPES)
        common = [f"--nproc-per-node={args.nproc}", f"--max-restarts={args.max_restarts}"]
        ours_logs, theirs_logs = where / "logs", where / "torchrun_logs"
        ours_argv = [*SAFELAUNCH, "--log-dir", str(ours_logs), *common]
        theirs_argv = [*TORCHRUN, "--standalone", "--tee=3", "--log-dir", str(theirs_logs)]
        theirs_argv += common
        script = ["shapes.py", str(args.work)]
        ours, theirs = [], []
        for _ in range(args.repeat):
            ours.append(run_once([*ours_argv, *script], where, ours_logs))
            theirs.append(run_once([*theirs_argv, *script], where, theirs_logs))
    for name, runs in (("safelaunch", ours), ("torchrun", theirs)):
        last = runs[-1]
        print(
            f"{name:<11} wall {statistics.median(r.wall for r in runs):7.2f} s  "
            f"attempts {last.attempts}  exit {last.code}"
        )
    ratio = statistics.median(r.wall for r in ours) / statistics.median(r.wall for r in theirs)
    print(
        f"deterministic failure, --max-restarts {args.max_restarts}, {args.nproc} ranks, "
        f"{args.work:g} s of work per attempt: safelaunch/torchrun wall ratio {ratio:.3f}"
    )


if __name__ == "__main__":
    main()
