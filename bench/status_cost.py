"""What `safelaunch status` and the timeline cost, measured on a real job.

    .venv/bin/python bench/status_cost.py [--ranks 8] [--repeat 5]

A job of N ranks (no torch: each sleeps in short steps and reports them) runs with
--hang-timeout 5, so the launcher writes its live state at its fastest (every 0.5 s).
With --nodes N, the other N-1 nodes' snapshots are this node's, copied with their node,
host and global ranks moved (what each launcher writes from the store: live/node<k>.json),
so that status reads and draws a job of N nodes x --ranks. While it runs: the wall and
CPU time of `safelaunch status` and `status --json` with the modules' bytecode cached (as
an installed package has it; here in a scratch PYTHONPYCACHEPREFIX), of `status` compiling
safelaunch's modules every call (PYTHONDONTWRITEBYTECODE=1, as this machine's shells run:
the figures in docs/scale.md before issue 29's fix were taken so), and the size of the
live snapshot. Then the job is stopped (Ctrl-C); after it, the time to draw report.html +
timeline.json from the run's records again (what every launch pays once at its end), and
their sizes. Printed, not asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).parent
WORKER = HERE.parent / "tests" / "workers" / "stepped_sleep.py"
SAFELAUNCH = [sys.executable, "-m", "safelaunch"]


def _timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one call (CPU: what a loaded machine disturbs far less)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu


def _line(what: str, calls: list[tuple[float, float]]) -> str:
    walls, cpus = [w for w, _ in calls], [c for _, c in calls]
    return (
        f"{what}: median {statistics.median(walls):.3f} s (min {min(walls):.3f}), "
        f"CPU median {statistics.median(cpus):.3f} s"
    )


def _copy_nodes(live: Path, nodes: int, ranks: int) -> None:
    """Nodes 1..N-1 as node 0's snapshot, refreshed every 0.5 s while the job runs."""
    while live.exists() and nodes > 1:
        try:
            record = json.loads(live.read_text())
        except (OSError, ValueError):
            continue
        if record.get("state") != "running":
            return
        for node in range(1, nodes):
            other = {**record, "node": node, "host": f"{record['host']}-n{node}"}
            other["ranks"] = [{**r, "rank": r["rank"] + node * ranks} for r in record["ranks"]]
            target = live.with_name(f"node{node}.json")
            target.with_suffix(".tmp").write_text(json.dumps(other))
            target.with_suffix(".tmp").replace(target)
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # long enough for every call below on a loaded machine; stopped once they are done
        env = {**os.environ, "STEPS": "1", "ROUNDS": "400", "SAFELAUNCH_ISOLATE": "never"}
        job = subprocess.Popen(
            [*SAFELAUNCH, "--log-dir", "logs", f"--nproc-per-node={args.ranks}",
             "--hang-timeout=5", str(WORKER)],
            cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        live = work / "logs" / "latest" / "attempt_0" / "live" / "node0.json"
        while not live.exists():
            time.sleep(0.1)
        time.sleep(2)
        copies = threading.Thread(target=_copy_nodes, args=(live, args.nodes, args.ranks))
        copies.start()
        time.sleep(1)
        status = [*SAFELAUNCH, "status", "--log-dir", "logs"]
        cached = {**os.environ, "PYTHONPYCACHEPREFIX": str(work / "pycache")}
        cached.pop("PYTHONDONTWRITEBYTECODE", None)
        compiling = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        compiling.pop("PYTHONPYCACHEPREFIX", None)
        _timed(status, work, cached)  # writes the bytecode
        look = [_timed(status, work, cached) for _ in range(args.repeat)]
        js = [_timed([*status, "--json"], work, cached) for _ in range(args.repeat)]
        cold = [_timed(status, work, compiling) for _ in range(args.repeat)]
        load = os.getloadavg()  # while status ran, not after the report below
        snapshot = live.stat().st_size
        job.send_signal(signal.SIGINT)
        job.wait()
        copies.join()
        run = (work / "logs" / "latest").resolve()
        report = json.loads((run / "attempt_0" / "report.json").read_text())
        from safelaunch.rundir.writing import write_file
        from safelaunch.view import write_views

        draws = []
        for _ in range(20):
            t = time.perf_counter()
            write_views(run, write_file)
            draws.append(time.perf_counter() - t)
        sizes = [(run / name).stat().st_size for name in ("report.html", "timeline.json")]
    one, five, _ = load
    print(f"load average {one:.1f} {five:.1f} on {os.cpu_count()} cores")
    print(f"{args.nodes} node(s) x {args.ranks} ranks, {report['duration_s']:.1f} s job")
    print(_line("safelaunch status", look))
    print(_line("safelaunch status --json", js))
    print(_line("safelaunch status, compiling every module", cold))
    print(f"live snapshot: {snapshot} bytes")
    print(
        f"report.html + timeline.json drawn again: median {statistics.median(draws) * 1000:.1f} ms"
    )
    print(f"report.html {sizes[0]} bytes, timeline.json {sizes[1]} bytes")


if __name__ == "__main__":
    main()
