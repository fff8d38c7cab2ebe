"""Elastic membership under --nnodes=2:3: torchrun 2.13 and safelaunch side by side.

    .venv/bin/python bench/elastic.py [--launcher both|safelaunch|torchrun]
        [--scenario both|lost|join] [--limit SECONDS]

Launchers on loopback (c10d, --max-restarts=3, one Gloo rank each).
- lost: three train until the third node is killed whole (its launcher and its ranks,
  SIGKILL); the two that remain should meet again and finish (a restarted group trains 3
  steps and ends). torchrun is expected to fail (issue 26: its restarted groups meet the
  previous attempt's Gloo addresses in connectFullMesh).
- join: two train until a third launcher starts; the three should meet again and finish
  (a group of 3 trains 3 steps and ends).
Printed per launcher: each node's exit code, whether the group that ends trained, and the
wall time from the kill (the third's start) to the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from loopback import free_port

PYTHON = sys.executable
# keep-alive 5 s: torch drops a node waiting to join whose beat is older (2 s is too tight
# on a loaded machine); a lost node is then known within 5 s
CONF = "keep_alive_interval=2,keep_alive_max_attempt=3,last_call_timeout=1,join_timeout=60"
JOB = """
import os, sys, time
import torch, torch.distributed as dist
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
world = int(os.environ["WORLD_SIZE"])
# join: the group of 3 ends (torchrun does not count an admission as a restart)
ends = world == 3 if sys.argv[2] == "join" else attempt > 0
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
step = 0
while not ends or step < 3:
    model(torch.ones(8, 4)).sum().backward()
    if step == 0 and attempt == 0:
        open(os.path.join(sys.argv[1], f"ready-{os.environ['RANK']}"), "w").close()
    time.sleep(0.1)
    step += 1
print(f"TRAINED attempt {attempt} world {world} ends {ends}", flush=True)
dist.barrier()
os._exit(0)
"""


def launcher_argv(name: str, port: int, node: int, where: Path, scenario: str) -> list[str]:
    common = [
        "--nnodes=2:3",
        "--nproc-per-node=1",
        "--max-restarts=3",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=bench",
        f"--rdzv-conf={CONF},is_host={int(node == 0)}",
    ]
    script = [str(where / "job.py"), str(where / "ready"), scenario]
    if name == "torchrun":
        return [str(Path(PYTHON).with_name("torchrun")), *common, *script]
    return [PYTHON, "-m", "safelaunch", "--log-dir", str(where / f"logs{node}"), *common, *script]


def kill_node(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    """The launcher and every process under it (ranks run in sessions of their own)."""
    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    os.killpg(proc.pid, signal.SIGKILL)
    for child in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


def start(name: str, port: int, node: int, where: Path, scenario: str) -> subprocess.Popen:  # type: ignore[type-arg]
    return subprocess.Popen(
        launcher_argv(name, port, node, where, scenario),
        cwd=where,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_ready(where: Path, ranks: int) -> bool:
    deadline = time.monotonic() + 180
    while len(list((where / "ready").iterdir())) < ranks and time.monotonic() < deadline:
        time.sleep(0.1)
    return len(list((where / "ready").iterdir())) >= ranks


def run(name: str, scenario: str, limit: float) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-elastic-") as text:
        where = Path(text)
        (where / "job.py").write_text(JOB)
        (where / "ready").mkdir()
        port = free_port()
        procs = []
        for node in range(3 if scenario == "lost" else 2):
            procs.append(start(name, port, node, where, scenario))
            time.sleep(0.5)  # node 0 first: it hosts the store
        if not wait_ready(where, len(procs)):  # a change before training proves nothing
            for proc in procs:
                kill_node(proc)
                proc.communicate()
            print(f"{name:<10} {scenario}: not every rank trained within 180 s: no result")
            return
        changed = time.monotonic()
        if scenario == "lost":
            kill_node(procs[2])
            procs[2].communicate()
            watched = procs[:2]
        else:
            procs.append(start(name, port, 2, where, scenario))
            watched = procs
        results = []
        for proc in watched:
            try:
                out, _ = proc.communicate(timeout=max(1.0, changed + limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_node(proc)
                out, _ = proc.communicate()
                out += f"\n(killed by the bench after {limit:g} s)"
            results.append((proc.returncode, out))
        wall = time.monotonic() - changed
        for index, (code, out) in enumerate(results):
            ended = any("ends True" in line for line in out.splitlines() if "TRAINED" in line)
            print(
                f"{name:<10} {scenario}: node {index}: exit {code}, the last group trained: {ended}"
            )
            if not ended:  # what went wrong, in the launcher's own words
                print("\n".join(f"    {line[:200]}" for line in out.splitlines()[-12:]))
        what = "the kill" if scenario == "lost" else "the third's start"
        print(f"{name:<10} {scenario}: {wall:.1f} s from {what} to the end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launcher", choices=["both", "safelaunch", "torchrun"], default="both")
    parser.add_argument("--scenario", choices=["both", "lost", "join"], default="both")
    parser.add_argument("--limit", type=float, default=300, help="seconds after the change")
    args = parser.parse_args()
    for scenario in ("lost", "join"):
        for name in ("safelaunch", "torchrun"):
            if args.launcher in ("both", name) and args.scenario in ("both", scenario):
                run(name, scenario, args.limit)


if __name__ == "__main__":
    main()
