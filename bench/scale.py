"""Cost as the job grows: N launchers on loopback (c10d), safelaunch and torchrun in turns.

    .venv/bin/python bench/scale.py --what rdzv,store,verdict,cpu --nodes 2,4,8,16 [--nproc 2]
        [--repeat 1] [--seconds 60 | --smoke]

- rdzv: launch to first step (every rank past init_process_group and one barrier) and to
  the end, noop ranks; safelaunch / torchrun ratio.
- store: operations and bytes per second that safelaunch asks of the job's store over a
  healthy job of --seconds, in all, per node, node 0's and the busiest other node's
  (torchstore.TextStore's counters, written at the end to $SAFELAUNCH_STORE_COUNTS). The
  workers' store is a separate TCPStore that safelaunch only hosts: it issues no
  operation on it.
- verdict: one rank stuck (HANG_RANK, --hang-timeout=3; keep-alive as tests/test_multinode.py's
  FAST, elsewhere torch's defaults, for both launchers): time from the first node's hang
  line (its deadline) to the job verdict on the last node, and whether every node printed
  the same "job (N nodes): ..." line; also a failing rank and a lost node (one launcher's
  process group killed) at the largest --nodes.
- cpu: one node, --nproc ranks (8), each with 4 DataLoader workers, --seconds of a healthy
  job: the launcher's own utime+stime over the window (/proc/<pid>/stat), per rank, per
  worker; torchrun's the same way.
Every table prints the load average: on a shared machine the figures are under that load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PYTHON = sys.executable
SAFELAUNCH = [str(Path(PYTHON).with_name("safelaunch"))]  # what users type, as torchrun
TORCHRUN = [str(Path(PYTHON).with_name("torchrun"))]
REPO = Path(__file__).resolve().parents[1]
MULTINODE = REPO / "tests" / "workers" / "multinode.py"
FAST = "keep_alive_interval=1,keep_alive_max_attempt=3"  # as tests/test_multinode.py
WAIT = 600  # seconds for every launcher of one run to end: 16 x 2 on 2 loaded cores take minutes
NOOP = """
import os, time, torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
where = os.path.join(os.environ["STEP_DIR"], "step-" + os.environ["RANK"])
open(where, "w").write(repr(time.time()))
os._exit(0)
"""
STEADY = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
for _ in range(int(float(os.environ["SECONDS_"]) / 0.2)):  # a count, not a clock: the same
    dist.all_reduce(t)  # collectives on every rank (a clock ends the loops unevenly)
    time.sleep(0.2)
dist.barrier()
os._exit(0)
"""
LOADER = """
import os, time, torch
from torch.utils.data import DataLoader, Dataset
class Slow(Dataset):
    def __len__(self): return 10**9
    def __getitem__(self, i):
        time.sleep(0.05)
        return torch.ones(4)
end = time.time() + float(os.environ["SECONDS_"])
for batch in DataLoader(Slow(), batch_size=2, num_workers=4):
    if time.time() > end:
        break
os._exit(0)
"""


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} {five:.1f} {fifteen:.1f} on {os.cpu_count()} cores"


class Node:
    """One launcher, its console lines timestamped as they arrive."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append((time.time(), line.rstrip("\n")))

    def wait(self, timeout: float) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait()
        self._reader.join(5)
        return code

    def first(self, text: str) -> float | None:
        return next((when for when, line in self.lines if text in line), None)


def launch(
    ours: bool,
    nodes: int,
    nproc: int,
    script: Path,
    where: Path,
    env: dict[str, str],
    extra: tuple[str, ...] = (),
    conf: str | None = FAST,
) -> list[Node]:
    """`nodes` launchers; `conf` their --rdzv-conf (None: torch's defaults)."""
    port = random.randint(20000, 45000)
    base = SAFELAUNCH if ours else TORCHRUN
    started = []
    for n in range(nodes):
        argv = [
            *base,
            f"--nnodes={nodes}",
            f"--nproc-per-node={nproc}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            "--rdzv-id=scale",
            *([f"--rdzv-conf={conf}"] if conf else []),
            *extra,
            str(script),
        ]
        started.append(Node(argv, where / f"node{n}", env))
    return started


def wait_all(started: list[Node], timeout: float) -> list[int]:
    """Every launcher's exit code, within one shared deadline."""
    deadline = time.time() + timeout
    return [node.wait(max(1.0, deadline - time.time())) for node in started]


def last_words(started: list[Node]) -> str:
    """Each distinct last line of the launchers, with the first node that said it."""
    said: dict[str, int] = {}
    for number, node in enumerate(started):
        for _, line in node.lines[-3:]:
            said.setdefault(line[:300], number)
    return "\n".join(f"  node {n}: {line}" for line, n in said.items())


def rdzv(nodes_list: list[int], nproc: int, repeat: int, tmp: Path, conf: str | None) -> None:
    script = tmp / "noop.py"
    script.write_text(NOOP)
    print(f"\nlaunch to first step, noop ranks, {nproc} a node ({load()})")
    print(
        f"{'nodes':>5} {'safelaunch step':>15} {'torchrun step':>13} {'ratio':>6}"
        f" {'safelaunch end':>14} {'torchrun end':>12} {'ratio':>6}"
    )
    for nodes in nodes_list:
        figures: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for turn in range(repeat):
            for ours in (True, False):
                steps = tmp / f"steps-{nodes}-{turn}-{ours}"
                steps.mkdir()
                env = {**os.environ, "STEP_DIR": str(steps)}
                start = time.time()
                started = launch(ours, nodes, nproc, script, steps, env, conf=conf)
                codes = wait_all(started, WAIT)
                end = time.time() - start
                assert codes == [0] * nodes, f"{ours} {codes}\n{last_words(started)}"
                step = max(float(p.read_text()) for p in steps.glob("step-*")) - start
                figures[ours].append((step, end))
        (s_step, s_end), (t_step, t_end) = (
            tuple(min(f[i] for f in figures[ours]) for i in (0, 1)) for ours in (True, False)
        )
        print(
            f"{nodes:>5} {s_step:>14.2f}s {t_step:>12.2f}s {s_step / t_step:>6.2f}"
            f" {s_end:>13.2f}s {t_end:>11.2f}s {s_end / t_end:>6.2f}"
        )


def store(nodes_list: list[int], nproc: int, seconds: float, tmp: Path, conf: str | None) -> None:
    script = tmp / "steady.py"
    script.write_text(STEADY)
    print(f"\nsafelaunch's operations on the job's store, healthy {seconds:g} s job ({load()})")
    print(
        f"{'nodes':>5} {'ops/s':>8} {'bytes/s':>9} {'ops/s/node':>10} {'B/s/node':>9}"
        f" {'node 0 ops/s':>12} {'B/s':>7} {'other ops/s':>11} {'B/s':>5}  by op"
    )
    for nodes in nodes_list:
        counts = tmp / f"counts-{nodes}"
        counts.mkdir()
        env = {**os.environ, "SECONDS_": str(seconds), "SAFELAUNCH_STORE_COUNTS": str(counts)}
        started = launch(True, nodes, nproc, script, counts, env, conf=conf)
        codes = wait_all(started, WAIT + seconds)
        assert codes == [0] * nodes, f"{codes}\n{last_words(started)}"
        records = [json.loads(p.read_text()) for p in counts.glob("store-*.json")]
        assert len(records) == nodes
        span = max(r["seconds"] for r in records)
        by_op = {op: sum(r["ops"][op][0] for r in records) for op in records[0]["ops"]}
        ops = sum(by_op.values()) / span
        size = sum(r["ops"][op][1] for r in records for op in r["ops"]) / span
        ops_text = " ".join(f"{op}={n / span:.0f}" for op, n in by_op.items())

        def rate(record: dict, what: int) -> float:
            return sum(entry[what] for entry in record["ops"].values()) / record["seconds"]

        first = next(r for r in records if r["node"] == 0)
        other = max((r for r in records if r["node"] != 0), key=lambda r: rate(r, 0))
        print(
            f"{nodes:>5} {ops:>8.0f} {size:>9.0f} {ops / nodes:>10.1f} {size / nodes:>9.0f}"
            f" {rate(first, 0):>12.1f} {rate(first, 1):>7.0f} {rate(other, 0):>11.1f}"
            f" {rate(other, 1):>5.0f}  {ops_text}"
        )


def same_verdict(started: list[Node], nodes: int) -> tuple[int, set[str]]:
    marker = f"job ({nodes} nodes): "
    found = set()
    printed = 0
    for node in started:
        lines = [line.split(marker, 1)[1] for _, line in node.lines if marker in line]
        printed += bool(lines)
        found.update(lines[:1])
    return printed, found


def verdict(nodes_list: list[int], nproc: int, tmp: Path, kinds: str, conf: str | None) -> None:
    print(f"\nhang deadline to the job verdict on the last node, --hang-timeout=3 ({load()})")
    print(f"{'nodes':>5} {'latency':>8} {'nodes printing':>14} {'distinct':>8}  verdict")
    culprits = random.Random(29)
    for nodes in nodes_list if "hang" in kinds else ():
        culprit = culprits.randrange(nodes * nproc)
        where = tmp / f"hang-{nodes}"
        env = {**os.environ, "HANG_RANK": str(culprit), "PIDS_DIR": str(tmp)}
        started = launch(True, nodes, nproc, MULTINODE, where, env, ("--hang-timeout=3",), conf)
        wait_all(started, WAIT)
        deadline = min(t for n in started if (t := n.first("hang: no rank made progress")))
        last = max(t for n in started if (t := n.first(f"job ({nodes} nodes): HUNG")))
        printed, found = same_verdict(started, nodes)
        shown = next(iter(found))[:90] if len(found) == 1 else found
        print(f"{nodes:>5} {last - deadline:>7.2f}s {printed:>14} {len(found):>8}  {shown}")
    nodes = max(nodes_list)
    for kind in [k for k in ("fail", "lost") if k in kinds]:
        where = tmp / f"{kind}-{nodes}"
        pids = where / "pids"
        pids.mkdir(parents=True)
        env = {**os.environ, "PIDS_DIR": str(pids)}
        env.update({"FAIL_RANK": str(nodes * nproc - 1)} if kind == "fail" else {"FOREVER": "1"})
        flags = ("--shutdown-timeout=2",)
        started = launch(True, nodes, nproc, MULTINODE, where, env, flags, conf)
        if kind == "lost":
            deadline = time.time() + 300
            while len(list(pids.glob("ready-*"))) < nodes * nproc and time.time() < deadline:
                time.sleep(0.5)
            os.killpg(started[nodes // 2].proc.pid, signal.SIGKILL)
            killed = time.time()
        wait_all(started, WAIT)
        alive = [n for i, n in enumerate(started) if kind == "fail" or i != nodes // 2]
        printed, found = same_verdict(alive, nodes)
        shown = next(iter(found))[:90] if len(found) == 1 else found
        after = ""
        if kind == "lost":
            last = max((t for n in alive if (t := n.first(f"job ({nodes} nodes):"))), default=0)
            after = f" (last verdict {last - killed:.1f} s after the kill)"
        print(
            f"{kind} at {nodes} nodes: {printed} of {len(alive)} nodes printed, "
            f"{len(found)} distinct{after}: {shown}"
        )


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu(nproc: int, seconds: float, tmp: Path) -> None:
    script = tmp / "loader.py"
    script.write_text(LOADER)
    workers = 4
    print(
        f"\nlauncher CPU, 1 node x {nproc} ranks x {workers} DataLoader workers, "
        f"{seconds:g} s window ({load()})"
    )
    print(f"{'launcher':>10} {'% core':>7} {'per rank':>9} {'per worker':>10}")
    shares = {}
    for ours in (True, False):
        env = {**os.environ, "SECONDS_": str(seconds + 30)}
        argv = [*(SAFELAUNCH if ours else TORCHRUN), f"--nproc-per-node={nproc}", str(script)]
        where = tmp / f"cpu-{ours}"
        where.mkdir()
        node = Node(argv, where, env)
        time.sleep(15)  # torch imported in every rank, the workers forked
        before, at = cpu_seconds(node.proc.pid), time.monotonic()
        time.sleep(seconds)
        share = 100 * (cpu_seconds(node.proc.pid) - before) / (time.monotonic() - at)
        node.wait(120)
        shares[ours] = share
        name = "safelaunch" if ours else "torchrun"
        print(f"{name:>10} {share:>6.2f}% {share / nproc:>8.3f}% {share / nproc / workers:>9.4f}%")
    print(f"ratio safelaunch/torchrun {shares[True] / max(shares[False], 1e-9):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--what", default="rdzv,store,verdict,cpu")
    parser.add_argument("--nodes", default="2,4,8,16")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--kinds", default="hang,fail,lost", help="verdict: which faults")
    parser.add_argument(
        "--slow", action="store_true", help="torch's keep-alive (5 s x 3), not FAST (1 s x 3)"
    )
    parser.add_argument("--smoke", action="store_true", help="10 s windows")
    args = parser.parse_args()
    seconds = 10.0 if args.smoke else args.seconds
    nodes_list = [int(n) for n in args.nodes.split(",")]
    conf = None if args.slow else FAST
    print(f"keep-alive: {'torch defaults' if conf is None else conf}")
    with tempfile.TemporaryDirectory() as where:
        tmp = Path(where)
        for what in args.what.split(","):
            if what == "rdzv":
                rdzv(nodes_list, args.nproc, args.repeat, tmp, conf)
            elif what == "store":
                store(nodes_list, args.nproc, seconds, tmp, conf)
            elif what == "verdict":
                verdict(nodes_list, args.nproc, tmp, args.kinds, conf)
            elif what == "cpu":
                cpu(8 if args.nproc == 2 else args.nproc, seconds, tmp)


if __name__ == "__main__":
    main()
