"""safelaunch against torchrun 2.13, in one run, with ratios.

    .venv/bin/python bench/vs_torchrun.py [--repeat 5] [--lines 200000]

1. Launch overhead: 4 ranks of an empty script; wall time and the launcher's peak
   RSS (wait4's ru_maxrss: the launcher or its largest child, whichever is larger;
   the ranks are the same for both). Targets: <= 0.10x wall, <= 0.15x RSS.
2. Teeing: 4 ranks x N lines each, console to a pipe that is drained (as under
   SLURM), every line also in a file. torchrun needs `--tee 3` for that. Target
   <= 0.8x wall. Lines reaching the console are counted for both.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PYTHON = sys.executable
SAFELAUNCH = [PYTHON, "-m", "safelaunch"]
TORCHRUN = [str(Path(PYTHON).with_name("torchrun"))]
PRINTER = """
import os, sys
rank, count, pad = os.environ["RANK"], int(sys.argv[1]), "x" * 40
for i in range(count):
    print(f"r{rank} {i:07d} {pad}")
"""


def run_once(argv: list[str], cwd: Path) -> tuple[float, int, bytes]:
    """Wall seconds, peak RSS in KiB (wait4), and everything written to stdout."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    output = proc.stdout.read()  # drained like a SLURM log pipe
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}")
    return wall, usage.ru_maxrss, output


def measure(argv: list[str], cwd: Path, repeat: int) -> tuple[float, float, bytes]:
    walls, rss, output = [], [], b""
    for _ in range(repeat):
        wall, peak, output = run_once(argv, cwd)
        walls.append(wall)
        rss.append(peak)
    return statistics.median(walls), statistics.median(rss), output


def ratio_line(name: str, ours: float, theirs: float, unit: str, target: float) -> str:
    ratio = ours / theirs
    verdict = "ok" if ratio <= target else "MISSED"
    return (
        f"{name:<28} safelaunch {ours:9.3f}{unit}  torchrun {theirs:9.3f}{unit}  "
        f"ratio {ratio:5.3f}  (target <= {target:.2f}: {verdict})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--lines", type=int, default=200_000)
    args = parser.parse_args()
    # Like with like: pip byte-compiles torch (and a normal install of safelaunch) at install
    # time; an editable install under PYTHONDONTWRITEBYTECODE would compile on every start.
    import safelaunch

    compileall.compile_dir(Path(safelaunch.__file__).parent, quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "empty.py").write_text("")
        (work / "printer.py").write_text(PRINTER)
        logs = ["--log-dir", str(work / "logs")]

        ours = measure([*SAFELAUNCH, *logs, "--nproc_per_node=4", "empty.py"], work, args.repeat)
        theirs = measure([*TORCHRUN, *logs, "--nproc_per_node=4", "empty.py"], work, args.repeat)
        print(f"launch of 4 ranks of an empty script (median of {args.repeat})")
        print(ratio_line("  wall", ours[0], theirs[0], " s", 0.10))
        print(ratio_line("  peak RSS", ours[1] / 1024, theirs[1] / 1024, " MiB", 0.15))

        printer = ["--nproc_per_node=4", "printer.py", str(args.lines)]
        repeat = max(1, args.repeat // 2)
        ours = measure([*SAFELAUNCH, *logs, *printer], work, repeat)
        theirs = measure([*TORCHRUN, *logs, "--tee", "3", *printer], work, repeat)
        expected = 4 * args.lines
        print(f"4 ranks x {args.lines} lines teed to files and a drained pipe (median of {repeat})")
        print(ratio_line("  wall", ours[0], theirs[0], " s", 0.80))
        for name, output in (("safelaunch", ours[2]), ("torchrun --tee 3", theirs[2])):
            whole = sum(1 for line in output.splitlines() if line.endswith(b"x" * 40))
            print(f"  {name:<18} whole lines on the console: {whole}/{expected}")


if __name__ == "__main__":
    main()
