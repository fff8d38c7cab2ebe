"""A node lost mid-training under --nnodes=2:3: torchrun 2.13 and safelaunch side by side.

    .venv/bin/python bench/elastic.py [--launcher both|safelaunch|torchrun]

Three launchers on loopback (c10d, --max-restarts=3, one Gloo rank each) train until the
third node is killed whole (its launcher and its ranks, SIGKILL); the two that remain
should meet again and finish (attempt 1+ trains 3 steps and ends). Printed per launcher:
each survivor's exit code, whether a restarted attempt trained, and the wall time from
the kill to the end. torchrun is expected to fail (issue 26: its restarted groups meet the
previous attempt's Gloo addresses in connectFullMesh).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

PYTHON = sys.executable
CONF = "keep_alive_interval=1,keep_alive_max_attempt=2,last_call_timeout=1,join_timeout=60"
JOB = """
import os, sys, time
import torch, torch.distributed as dist
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
step = 0
while attempt == 0 or step < 3:
    model(torch.ones(8, 4)).sum().backward()
    if step == 0 and attempt == 0:
        open(os.path.join(sys.argv[1], f"ready-{os.environ['RANK']}"), "w").close()
    time.sleep(0.1)
    step += 1
print(f"TRAINED attempt {attempt} world {dist.get_world_size()}", flush=True)
dist.barrier()
os._exit(0)
"""


def launcher_argv(name: str, port: int, node: int, where: Path) -> list[str]:
    common = [
        "--nnodes=2:3",
        "--nproc-per-node=1",
        "--max-restarts=3",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=bench",
        f"--rdzv-conf={CONF},is_host={int(node == 0)}",
    ]
    script = [str(where / "job.py"), str(where / "ready")]
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


def run(name: str) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-elastic-") as text:
        where = Path(text)
        (where / "job.py").write_text(JOB)
        (where / "ready").mkdir()
        port = random.randint(20000, 45000)
        procs = []
        for node in range(3):
            argv = launcher_argv(name, port, node, where)
            procs.append(
                subprocess.Popen(
                    argv,
                    cwd=where,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
            )
            time.sleep(0.5)  # node 0 first: it hosts the store
        deadline = time.monotonic() + 180
        while len(list((where / "ready").iterdir())) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        if len(list((where / "ready").iterdir())) < 3:  # a kill before training proves nothing
            for proc in procs:
                kill_node(proc)
                proc.communicate()
            print(f"{name:<10} not every rank trained within 180 s: machine too loaded, no result")
            return
        killed = time.monotonic()
        kill_node(procs[2])
        results = []
        for proc in procs[:2]:
            try:
                out, _ = proc.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                kill_node(proc)
                out, _ = proc.communicate()
            results.append((proc.returncode, out))
        wall = time.monotonic() - killed
        procs[2].communicate()
        for index, (code, out) in enumerate(results):
            restarted = [line for line in out.splitlines() if "TRAINED attempt" in line]
            trained = any("TRAINED attempt 0" not in line for line in restarted)
            print(f"{name:<10} survivor {index}: exit {code}, a restart trained: {trained}")
            if not trained:  # what went wrong, in the launcher's own words
                print("\n".join(f"    {line}" for line in out.splitlines()[-15:]))
        print(f"{name:<10} {wall:.1f} s from the kill to the survivors' end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launcher", choices=["both", "safelaunch", "torchrun"], default="both")
    chosen = parser.parse_args().launcher
    for name in ("safelaunch", "torchrun"):
        if chosen in ("both", name):
            run(name)


if __name__ == "__main__":
    main()
