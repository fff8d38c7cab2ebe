"""What each extra rank costs a safelaunch launch, against the floor of starting interpreters.

    .venv/bin/python bench/per_rank.py [--repeat 7]

For N = 1, 2, 4, 8 empty ranks: the wall time of `safelaunch --nproc_per_node=N noop.py`
and of the floor, N `python noop.py` started in parallel from a shell. The per-rank cost
is the slope of a least-squares line through the four points. Target: safelaunch's slope
<= 2x the floor's. The same for CPU time (user + system of the launcher, or the shell, and
of every process it waited for): on a machine busier than its cores the wall slope mostly
measures the load (then it is printed but not judged); the CPU slope still says what a
rank costs. Also the launcher-side costs a launch pays once: importing the launcher (and,
of that, creating its dataclasses) and the preflight without GPUs (target < 0.5 s; it was
a test assert before, and a timing target belongs here); and what the rank bootstrap adds
to one rank's start over a bare interpreter (CPU).

Every figure is the minimum of --repeat runs: the minimum is the run least disturbed by
whatever else the machine is doing, and shared machines are rarely idle.
"""

from __future__ import annotations

import argparse
import compileall
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PYTHON = sys.executable
COUNTS = (1, 2, 4, 8)


def best_of(argv: list[str], cwd: Path, repeat: int) -> tuple[float, float]:
    """Minimum wall seconds and minimum CPU seconds (user + system, the process and every
    descendant it waited for) of `repeat` runs of argv (each must exit 0)."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, usage.ru_utime + usage.ru_stime)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{argv} failed: {err.decode()}")
    return wall, cpu


def slope(points: dict[int, float]) -> float:
    """Seconds per extra rank: least-squares slope of wall time over N."""
    mean_n = sum(points) / len(points)
    mean_t = sum(points.values()) / len(points)
    num = sum((n - mean_n) * (t - mean_t) for n, t in points.items())
    return num / sum((n - mean_n) ** 2 for n in points)


# Imports the launch path the way a launch does (safelaunch/entry.py pauses the collector
# for it), timing the dataclasses it creates on the way (dataclasses.wrap looks
# _process_class up at each call, so the wrapper sees every one).
IMPORTS = """
import dataclasses, gc, time
gc.disable()
spent, count, process = 0.0, 0, dataclasses._process_class
def timed(*args, **kwargs):
    global spent, count
    start = time.perf_counter()
    try:
        return process(*args, **kwargs)
    finally:
        spent, count = spent + time.perf_counter() - start, count + 1
dataclasses._process_class = timed
start = time.perf_counter()
import safelaunch.cli, safelaunch.launch
print(time.perf_counter() - start, spent, count)
"""


def launcher_costs(work: Path, repeat: int) -> tuple[tuple[float, float, int], float]:
    """((importing the launch path, of it creating dataclasses, how many), preflight of 4 ranks
    without GPUs), each the minimum."""
    runs = [
        subprocess.run([PYTHON, "-c", IMPORTS], capture_output=True, check=True).stdout.split()
        for _ in range(repeat)
    ]
    imports = min((float(total), float(spent), int(count)) for total, spent, count in runs)
    from types import MappingProxyType

    from safelaunch.config import LaunchConfig
    from safelaunch.preflight import run_preflight

    config = LaunchConfig(
        training_script=str(work / "noop.py"),
        nproc_per_node=4,
        environ=MappingProxyType({"PATH": "/bin"}),
    )
    preflight = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        report = run_preflight(config)
        preflight = min(preflight, time.perf_counter() - start)
        report.master_port.release()
    return imports, preflight


def bootstrap_cost(work: Path, repeat: int) -> dict[str, tuple[float, float]]:
    """Minimum CPU seconds of one empty rank started through the bootstrap, with what a
    launch turns on in it (heartbeat, stack and flight-record signal, parent-death
    signal), and of a bare `python noop.py`: as this checkout runs them, and without
    `site` (python -S, the package found through PYTHONPATH).

    The second is what a plain install costs. The two agree since this project's editable
    install became a static path (pyproject.toml's package-dir); setuptools' import hook,
    its default, imported re, enum, functools and pathlib into every interpreter, which
    made the bare one dearer (~23 ms instead of ~10 ms here) and the bootstrap's own
    imports look cheaper.
    """
    from safelaunch.plan import DUMP_SIGNAL
    from safelaunch.rank import names

    (work / "flight").mkdir(exist_ok=True)
    env = {
        **os.environ,
        "RANK": "0",
        names.HEARTBEAT_DIR: str(work),
        names.HEARTBEAT_INTERVAL: "2.0",
        names.DUMP_SIGNAL: str(int(DUMP_SIGNAL)),
        names.STACKS_FILE: str(work / "rank0.stacks"),
        names.FLIGHT_DIR: str(work / "flight"),
        names.COMM_FILE: str(work / "rank0.comm.json"),
        names.LAUNCHER_PID: str(os.getpid()),  # the rank's parent: this process
    }
    package_root = str(Path(names.__file__).parents[2])

    def cpu(argv: list[str], env: dict[str, str]) -> float:
        proc = subprocess.Popen(argv, cwd=work, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{argv} failed")
        return usage.ru_utime + usage.ru_stime

    found: dict[str, tuple[float, float]] = {}
    for name, flags, extra in (
        ("as installed here", [], {}),
        ("without site", ["-S"], {"PYTHONPATH": package_root}),
    ):
        rank = [PYTHON, *flags, "-u", "-c", names.BOOTSTRAP_CODE, "script", "noop.py"]
        ranked = min(cpu(rank, {**env, **extra}) for _ in range(repeat * 3))
        bare = min(
            cpu([PYTHON, *flags, "noop.py"], {**os.environ, **extra}) for _ in range(repeat * 3)
        )
        found[name] = (ranked, bare)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    import safelaunch

    # Like a pip install: byte-compiled (an editable install under PYTHONDONTWRITEBYTECODE
    # would compile the launcher on every start).
    compileall.compile_dir(Path(safelaunch.__file__).parent, quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "noop.py").write_text("")
        floor, ours, floor_cpu, ours_cpu = {}, {}, {}, {}
        for n in COUNTS:
            shell = f"for i in $(seq {n}); do {PYTHON} noop.py & done; wait"
            floor[n], floor_cpu[n] = best_of(["sh", "-c", shell], work, args.repeat)
            launch = [PYTHON, "-m", "safelaunch", "--log-dir", str(work / "logs")]
            argv = [*launch, f"--nproc_per_node={n}", "noop.py"]
            ours[n], ours_cpu[n] = best_of(argv, work, args.repeat)
        imports, preflight = launcher_costs(work, args.repeat)
        bootstrap = bootstrap_cost(work, args.repeat)
    load = os.getloadavg()
    print(f"empty ranks, minimum of {args.repeat} runs each ({os.cpu_count()} cores; load")
    print(f"average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}: on a busy machine every figure")
    print("is higher and noisier; the minimum is the least disturbed run)")
    print(
        f"  {'N':>3}  {'wall: floor':>12} {'safelaunch':>11}"
        f"   {'CPU: floor':>11} {'safelaunch':>11}"
    )
    for n in COUNTS:
        print(
            f"  {n:>3}  {floor[n]:>10.3f} s {ours[n]:>9.3f} s   "
            f"{floor_cpu[n]:>9.3f} s {ours_cpu[n]:>9.3f} s"
        )
    ratio = slope(ours) / slope(floor)
    verdict = "ok" if ratio <= 2.0 else "MISSED"
    busy = os.getloadavg()[0] >= (os.cpu_count() or 1)
    if busy or slope(ours) <= 0 or slope(floor) <= 0:  # the load moves more than the ranks do
        verdict = "not judged: the machine is busier than its cores"
    print(
        f"  per extra rank, wall: safelaunch {slope(ours) * 1000:.1f} ms, floor "
        f"{slope(floor) * 1000:.1f} ms, ratio {ratio:.2f} (target <= 2.00: {verdict})"
    )
    # CPU is what a rank costs a busy machine, and it is far less disturbed by the load.
    ratio = slope(ours_cpu) / slope(floor_cpu)
    print(
        f"  per extra rank, CPU:  safelaunch {slope(ours_cpu) * 1000:.1f} ms, floor "
        f"{slope(floor_cpu) * 1000:.1f} ms, ratio {ratio:.2f} (target <= 2.00: "
        f"{'ok' if ratio <= 2.0 else 'MISSED'})"
    )
    print(f"  fixed cost at N=1: safelaunch {ours[1]:.3f} s, floor {floor[1]:.3f} s")
    verdict = "ok" if preflight < 0.5 else "MISSED"
    print(
        f"launcher import (cli + launch): {imports[0] * 1000:.1f} ms, of which creating its "
        f"{imports[2]} dataclasses {imports[1] * 1000:.1f} ms"
    )
    for name, (ranked, bare) in bootstrap.items():
        print(
            f"one empty rank, CPU, {name}: through the bootstrap {ranked * 1000:.1f} ms, "
            f"bare interpreter {bare * 1000:.1f} ms (the bootstrap adds "
            f"{(ranked - bare) * 1000:.1f} ms, {ranked / bare:.2f}x)"
        )
    print(f"preflight of 4 ranks, no GPUs: {preflight * 1000:.1f} ms (target < 500: {verdict})")


if __name__ == "__main__":
    main()
