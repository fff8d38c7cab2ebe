"""safelaunch against torchrun 2.13, in one run, with ratios.

    .venv/bin/python bench/vs_torchrun.py [--repeat 5] [--lines 200000]

1. Launch overhead: 4 ranks of an empty script; wall time and the launcher's peak
   RSS (wait4's ru_maxrss: the launcher or its largest child, whichever is larger;
   the ranks are the same for both). Targets: <= 0.10x wall, <= 0.15x RSS. The two
   launchers take turns, so that both see the same load; besides the medians, the
   least disturbed run (minimum) of each and the CPU time (launcher, ranks and every
   other process it waited for), which a busy machine disturbs far less than wall time.
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
from typing import NamedTuple

PYTHON = sys.executable
SAFELAUNCH = [PYTHON, "-m", "safelaunch"]
TORCHRUN = [str(Path(PYTHON).with_name("torchrun"))]
PRINTER = """
import os, sys
rank, count, pad = os.environ["RANK"], int(sys.argv[1]), "x" * 40
for i in range(count):
    print(f"r{rank} {i:07d} {pad}")
"""


class Run(NamedTuple):
    wall: float  # seconds
    cpu: float  # seconds, user + system, with every descendant waited for
    peak_rss: int  # KiB
    output: bytes  # everything written to stdout


def run_once(argv: list[str], cwd: Path) -> Run:
    """One run (it must exit 0), its console drained like a SLURM log pipe."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    output = proc.stdout.read()  # drained like a SLURM log pipe
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, output)


def in_turns(ours: list[str], theirs: list[str], cwd: Path, repeat: int) -> list[tuple[Run, Run]]:
    """`repeat` pairs of runs, one of each launcher in turn."""
    return [(run_once(ours, cwd), run_once(theirs, cwd)) for _ in range(repeat)]


def median(runs: list[Run], field: str) -> float:
    return float(statistics.median(getattr(run, field) for run in runs))


def least(runs: list[Run], field: str) -> float:
    return float(min(getattr(run, field) for run in runs))


def ratio_line(name: str, ours: float, theirs: float, unit: str, target: float | None) -> str:
    ratio = ours / theirs
    line = (
        f"{name:<22} safelaunch {ours:9.3f}{unit}  torchrun {theirs:9.3f}{unit}  ratio {ratio:5.3f}"
    )
    if target is None:
        return line + "  (no target: where the time goes)"
    return line + f"  (target <= {target:.2f}: {'ok' if ratio <= target else 'MISSED'})"


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

        empty = ["--nproc_per_node=4", "empty.py"]
        pairs = in_turns(
            [*SAFELAUNCH, *logs, *empty], [*TORCHRUN, *logs, *empty], work, args.repeat
        )
        ours, theirs = [p[0] for p in pairs], [p[1] for p in pairs]
        load = os.getloadavg()
        print(
            f"launch of 4 ranks of an empty script ({args.repeat} runs each, in turns; "
            f"{os.cpu_count()} cores, load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f})"
        )
        print(
            ratio_line("  wall, median", median(ours, "wall"), median(theirs, "wall"), " s", 0.10)
        )
        print(ratio_line("  wall, minimum", least(ours, "wall"), least(theirs, "wall"), " s", 0.10))
        print(ratio_line("  CPU, minimum", least(ours, "cpu"), least(theirs, "cpu"), " s", None))
        rss = median(ours, "peak_rss") / 1024, median(theirs, "peak_rss") / 1024
        print(ratio_line("  peak RSS, median", *rss, " MiB", 0.15))

        printer = ["--nproc_per_node=4", "printer.py", str(args.lines)]
        repeat = max(1, args.repeat // 2)
        pairs = in_turns(
            [*SAFELAUNCH, *logs, *printer], [*TORCHRUN, *logs, "--tee", "3", *printer], work, repeat
        )
        ours, theirs = [p[0] for p in pairs], [p[1] for p in pairs]
        expected = 4 * args.lines
        print(f"4 ranks x {args.lines} lines teed to files and a drained pipe (median of {repeat})")
        print(ratio_line("  wall", median(ours, "wall"), median(theirs, "wall"), " s", 0.80))
        for name, output in (
            ("safelaunch", ours[-1].output),
            ("torchrun --tee 3", theirs[-1].output),
        ):
            whole = sum(1 for line in output.splitlines() if line.endswith(b"x" * 40))
            print(f"  {name:<18} whole lines on the console: {whole}/{expected}")


if __name__ == "__main__":
    main()
