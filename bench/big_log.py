"""Diagnosis of huge and hostile logs: time and peak memory stay bounded (issue 13).

    .venv/bin/python bench/big_log.py [--size-mb 1024] [--line-mb 1]

1. `safelaunch explain` on a combined log of SIZE MB of NCCL INFO lines from 4 ranks
   (`[rankN]: host:pid:tid [N] NCCL INFO ...`), rank 2's traceback at the end.
2. The same on a log whose rank line is one LINE MB line built to make backtracking
   patterns quadratic ("network addresses of " repeated, "[rank1111..."), then a failure.
3. The launcher's own diagnosis (diagnose.read_tail + every signature) of one rank's
   SIZE MB log, in-process.

4. `explain` of a 16-node x 8-rank job's SLURM .out (--job-mb, 1024 by default): 128 ranks'
   training lines interleaved, prefixed as torchrun's `[rankN]:`, as `srun --label` writes
   them when srun starts every rank (`N: `, N the rank), and as it writes them when srun
   starts one launcher a node (`N: [rankM]:`, N the node), one rank's real traceback
   (Python's own) in the middle.

Each line prints wall seconds, CPU seconds and the peak RSS of the process that did the
work, and the load average (wall time on a loaded machine is many times the CPU time).
Before issue 13, 200 MB took up to 73 s and 931 MB; a 1 MB line took ~240 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NCCL = (
    "[rank{r}]: gpu-node-017:12345:12399 [{r}] NCCL INFO Channel 03/0 : {r}[{r}] -> "
    "{n}[{n}] via P2P/CUMEM/read comm 0x5581e2a0 nRanks 4 busId 1b000\n"
)
TRACEBACK = (
    "[rank2]: Traceback (most recent call last):\n"
    '[rank2]:   File "/job/train.py", line 41, in <module>\n'
    "[rank2]:     main()\n"
    "[rank2]: RuntimeError: ProcessGroupGloo::allgather: invalid tensor size\n"
)


def write_nccl_log(path: Path, size_mb: int) -> None:
    block = "".join(NCCL.format(r=r, n=(r + 1) % 4) for r in range(4)) * 2000
    data = block.encode()
    with path.open("wb") as out:
        written = 0
        while written < size_mb << 20:
            out.write(data)
            written += len(data)
        out.write(TRACEBACK.encode())


def write_long_line_log(path: Path, line_mb: int) -> None:
    words = ("network addresses of ", "DataLoader worker (pid(s) ", "1")
    with path.open("wb") as out:
        for rank, word in enumerate(words):
            out.write(f"[rank{rank}]: ".encode() + (word * ((line_mb << 20) // len(word))).encode())
            out.write(b"\n")
        out.write(b"[rank" + b"1" * (line_mb << 20) + b"\n")
        out.write(TRACEBACK.encode())


def real_traceback() -> list[str]:
    """Python's own traceback of a failing step, as a rank prints it."""
    import traceback

    def step(batch: list[int]) -> int:
        return batch[len(batch)]  # IndexError

    try:
        step([1, 2])
    except IndexError:
        return traceback.format_exc().splitlines()
    raise AssertionError("no traceback")


def write_job_log(path: Path, size_mb: int, label: str, ranks: int = 128) -> int:
    """Interleaved training lines of `ranks` ranks; one rank's traceback half-way. Its rank."""

    def prefix(rank: int) -> str:
        if label == "srun-node":  # one launcher a node: the label is the node
            return f"{rank // 8:>2}: [rank{rank}]:"
        return f"[rank{rank}]:" if label == "torchrun" else f"{rank:>3}: "

    line = "step {s} loss 2.3{r:02d} lr 0.0003 tokens/s 41{r:03d} grad_norm 0.98 mem 61.2G\n"
    block = "".join(prefix(r) + line.format(s=s, r=r % 100) for s in range(8) for r in range(ranks))
    data = block.encode()
    culprit = 77
    crash = "".join(f"{prefix(culprit)}{text}\n" for text in real_traceback()).encode()
    with path.open("wb") as out:
        written = 0
        while written < size_mb << 20:
            out.write(data)
            written += len(data)
            if crash and written >= size_mb << 19:
                out.write(crash)
                crash = b""
    return culprit


def explain(path: Path) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) of the explain process, its root-cause line (with the
    process's CPU seconds, which a loaded machine disturbs far less than wall time)."""
    started = time.monotonic()
    # through a fresh parent: RUSAGE_CHILDREN's peak is the largest child's so far, so
    # this parent's own would carry an earlier, larger explain's peak into this one
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURED, sys.executable, "-m", "safelaunch", "explain", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.monotonic() - started
    measured = json.loads(proc.stdout.splitlines()[-1])
    lines = measured["stdout"].splitlines()
    said = [ln.strip() for ln in lines if ln.startswith("root") or "error:" in ln]
    root = "; ".join(said[:2]) or measured["stderr"][-200:] or "no root cause named"
    return wall, measured["rss"] / 1024, f"{measured['cpu']:.1f} s CPU; {root.strip()}"


_MEASURED = (
    "import json, resource, subprocess, sys\n"
    "proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(json.dumps({'stdout': proc.stdout, 'stderr': proc.stderr, 'rss': usage.ru_maxrss,"
    " 'cpu': usage.ru_utime + usage.ru_stime}))\n"
)


def launcher_diagnosis(path: Path) -> tuple[float, float]:
    """What the launcher does with one rank's log: tail read, every signature, traceback."""
    code = (
        "import sys, time, resource\n"
        "from pathlib import Path\n"
        "from safelaunch.diagnose import read_tail\n"
        "from safelaunch.diagnose.errortext import from_log\n"
        "from safelaunch.diagnose.match import matches, non_finite_loss\n"
        "t = time.monotonic(); text = read_tail(Path(sys.argv[1]))\n"
        "matches(text, None); non_finite_loss(text); from_log(Path(sys.argv[1]), text)\n"
        "print(time.monotonic() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), float(out[1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--line-mb", type=int, default=1)
    parser.add_argument("--job-mb", type=int, default=1024)
    parser.add_argument("--only-job", action="store_true", help="item 4 alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for label in ("torchrun", "srun", "srun-node"):
            job = Path(scratch) / f"job-{label}.out"
            culprit = write_job_log(job, args.job_mb, label)
            size = job.stat().st_size / (1 << 20)
            wall, rss, root = explain(job)
            job.unlink()
            load = os.getloadavg()[0]
            print(
                f"explain, {size:.0f} MB 16x8-rank .out ({label} prefixes, traceback of rank "
                f"{culprit}): {wall:.2f} s, peak RSS {rss:.0f} MiB ({root}), load {load:.1f}"
            )
        if args.only_job:
            return
        big, long_lines = Path(scratch) / "big.out", Path(scratch) / "long.out"
        write_nccl_log(big, args.size_mb)
        write_long_line_log(long_lines, args.line_mb)
        size = big.stat().st_size / (1 << 20)
        wall, rss, root = explain(big)
        print(
            f"explain, {size:.0f} MB NCCL INFO log: {wall:.2f} s, peak RSS {rss:.0f} MiB ({root})"
        )
        wall, rss, root = explain(long_lines)
        print(f"explain, {args.line_mb} MB lines x4: {wall:.2f} s, peak RSS {rss:.0f} MiB ({root})")
        seconds, rss = launcher_diagnosis(big)
        print(
            f"launcher diagnosis of a {size:.0f} MB rank log: {seconds:.2f} s, peak {rss:.0f} MiB"
        )
        seconds, rss = launcher_diagnosis(long_lines)
        print(f"launcher diagnosis, {args.line_mb} MB lines: {seconds:.2f} s, peak {rss:.0f} MiB")


if __name__ == "__main__":
    main()
