"""Cost as the job grows: N launchers on loopback (c10d), safelaunch and torchrun in turns.

    .venv/bin/python bench/scale.py --what rdzv,start,store,verdict,cpu --nodes 2,4,8,16
        [--nproc 2] [--repeat 1] [--seconds 60 | --smoke] [--ranks 2,4,8] [--workers 0,2,4]

- rdzv: launch to first step (every rank past init_process_group and one barrier) and to
  the end, noop ranks; safelaunch / torchrun ratio. With --repeat N >= 2, each turn's
  ratio and their median with its sign-test interval: "slower" only when the whole
  interval lies above 1 (one turn moves +-10 % on a shared VM).
- start: launch to first step in figures load does not disturb, per node: the CPU of
  its whole tree and of its ranks, safelaunch's store operations before the spawn, and
  the time from the node's placement to its first rank's script (both launchers).
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
- cpu: one node, --ranks (2,4,8) x --workers (0,2,4 DataLoader workers a rank), --seconds
  of a healthy job (a gloo all-reduce every batch) once every rank stepped: the launcher
  process's own utime+stime over the window (/proc/<pid>/stat: its threads, not its
  children), per rank and per process (ranks and workers); torchrun's the same way, in
  turns in each cell; a least-squares fit says whether the share per rank is flat.
Every table prints the load average: on a shared machine the figures are under that load.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from loopback import free_port

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
TIMED = """
import os, resource, time
began = time.time()
def cpu():
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime
at_script = cpu()  # the interpreter and the launcher's bootstrap (safelaunch's rank side)
import torch.distributed as dist
imported = cpu()
dist.init_process_group("gloo")
dist.barrier()
used = cpu()
import sys
sender = getattr(sys.modules.get("safelaunch.rank.beat"), "_active", None)
beat = sender.cost if sender is not None else 0.0  # safelaunch's heartbeat thread, of `used`
where = os.path.join(os.environ["STEP_DIR"], "step-" + os.environ["RANK"])
open(where, "w").write(f"{began!r} {time.time()!r} {used!r} {at_script!r} {imported!r} {beat!r}")
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
TRAIN = """
import os, sys, time, torch, torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
class Slow(Dataset):  # a loader that waits on I/O: 20 ms an item
    def __len__(self): return 10**9
    def __getitem__(self, i):
        time.sleep(0.02)
        return torch.ones(4)
dist.init_process_group("gloo")
where, rank = os.environ["STEP_DIR"], os.environ["RANK"]
batches = iter(DataLoader(Slow(), batch_size=2, num_workers=int(os.environ["WORKERS_"])))
flag, step = torch.zeros(1), 0
while True:  # every rank stops at the same step: the stop file, all-reduced
    next(batches)
    flag.fill_(float(os.path.exists(os.path.join(where, "stop"))))
    dist.all_reduce(flag)
    step += 1
    if step == 3:
        open(os.path.join(where, "ready-" + rank), "w").close()
    if flag.item() > 0:
        break
del batches  # the workers end
dist.destroy_process_group()
sys.exit(0)
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
        self.cpu = float("nan")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append((time.time(), line.rstrip("\n")))

    def wait(self, timeout: float) -> int:
        """Its exit code; `cpu` then holds the CPU seconds of its whole tree: itself and
        every descendant waited for (the ranks), from wait4's rusage."""
        if self.proc.returncode is not None:  # reaped already (poll)
            return self.proc.returncode
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.killpg(self.proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(self.proc.pid, 0)
                break
            time.sleep(0.05)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.cpu = usage.ru_utime + usage.ru_stime
        self._reader.join(5)
        return self.proc.returncode

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
    port = free_port()
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
            for ours in _turn_order(turn):
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
        if repeat > 1:  # each turn's pair, run back to back: the ratio the load disturbs least
            pairs = [s[0] / t[0] for s, t in zip(figures[True], figures[False], strict=True)]
            print(f"      step ratio turn by turn: {' '.join(f'{r:.2f}' for r in pairs)}")
            print(f"      {paired_verdict(pairs)}")


def median_interval(values: list[float], coverage: float = 0.9) -> tuple[float, float, float]:
    """The median's distribution-free interval from order statistics (the sign test's):
    (low, high, its coverage), the narrowest pair (k-th smallest, k-th largest) that covers
    the true median with at least `coverage`; the widest (min, max) when too few values."""
    ordered = sorted(values)
    n = len(ordered)
    chance = [math.comb(n, i) / 2**n for i in range(n + 1)]
    k, covered = 1, 1 - 2 * chance[0]
    while k < n // 2 and 1 - 2 * sum(chance[: k + 1]) >= coverage:
        k += 1
        covered = 1 - 2 * sum(chance[:k])
    return ordered[k - 1], ordered[n - k], covered


def paired_verdict(pairs: list[float]) -> str:
    """safelaunch / torchrun, turn by turn: the median with its interval, and what it shows.
    Slower only when the whole interval lies above 1."""
    low, high, covered = median_interval(pairs)
    if low > 1:
        said = "safelaunch slower"
    elif high < 1:
        said = "safelaunch faster"
    else:
        said = "no difference shown (the interval holds 1.00)"
    return (
        f"median ratio {statistics.median(pairs):.2f}, {covered:.0%} interval"
        f" [{low:.2f}, {high:.2f}] over {len(pairs)} turns: {said}"
    )


def _turn_order(turn: int) -> tuple[bool, bool]:
    """Who goes first in a turn (True: safelaunch), in turns: the first of two runs on this
    VM pays for memory the host has taken back (free page reporting) and the second reuses
    it warm: 16 x 2 noop ranks imported torch ~0.1-0.3 s a rank slower first, whichever
    launcher it was."""
    return (True, False) if turn % 2 == 0 else (False, True)


def start(nodes_list: list[int], nproc: int, repeat: int, tmp: Path, conf: str | None) -> None:
    """Launch to first step in figures that load does not disturb, per node (median of the
    nodes, then the minimum of the turns): the CPU seconds of its whole process tree and
    of its ranks up to their first step; safelaunch's store operations before the spawn;
    the time from the nodes' placement (safelaunch: its `node k of N` line; torchrun:
    `Rendezvous complete for workers`, LOGLEVEL=INFO) to its first rank's script, and
    safelaunch's from torch's rendezvous returning to the placement."""
    script = tmp / "timed.py"
    script.write_text(TIMED)
    print(f"\nlaunch to first step, noop ranks, {nproc} a node, per node ({load()})")
    print(
        f"{'nodes':>5} {'launcher':>10} {'tree CPU':>8} {'ranks CPU':>9} {'rest CPU':>8}"
        f" {'ops':>4} {'rdzv->placed':>12} {'placed->rank':>12} {'step':>6}"
        f" {'ranks: boot':>11} {'import':>6} {'init':>6} {'beat':>5}  load"
    )
    for nodes in nodes_list:
        turns: dict[bool, list[list[float]]] = {True: [], False: []}
        for turn in range(repeat):
            for place, ours in enumerate(_turn_order(turn)):
                row = _start_turn(ours, nodes, nproc, script, tmp, conf, turn)
                turns[ours].append(row)
                print(
                    f"  turn {turn} {'safelaunch' if ours else 'torchrun'}"
                    f" {('first', 'second')[place]}: step {row[-1]:.1f} s, tree CPU"
                    f" {row[0]:.2f} s, ranks' import {row[6]:.2f} s a node",
                    flush=True,
                )
        for ours, rows in turns.items():
            tree, ranks, ops, joined, placed, boot, imports, init, beat, step = (
                min((row[i] for row in rows), key=lambda x: (x != x, x)) for i in range(10)
            )  # the least disturbed turn's figure; nan (not measured) last
            name = "safelaunch" if ours else "torchrun"
            one, five, _ = os.getloadavg()
            print(
                f"{nodes:>5} {name:>10} {tree:>7.2f}s {ranks:>8.2f}s {tree - ranks:>7.2f}s"
                f" {ops:>4.0f} {joined:>11.2f}s {placed:>11.2f}s {step:>5.1f}s"
                f" {boot:>10.2f}s {imports:>5.2f}s {init:>5.2f}s {beat:>4.2f}s"
                f"  {one:.1f} {five:.1f}",
                flush=True,
            )


def _start_turn(
    ours: bool, nodes: int, nproc: int, script: Path, tmp: Path, conf: str | None, turn: int
) -> list[float]:
    """One run: per node (tree CPU, ranks' CPU to the step, store ops before the spawn,
    rendezvous -> placed, placed -> first rank), medians over the nodes; and the launch to
    the last first step."""
    steps = tmp / f"start-{nodes}-{turn}-{ours}"
    steps.mkdir()
    env = {**os.environ, "STEP_DIR": str(steps), "SAFELAUNCH_STORE_COUNTS": str(steps)}
    if not ours:
        env["LOGLEVEL"] = "INFO"  # torchrun's "Rendezvous complete for workers" line
    begun = time.time()
    started = launch(ours, nodes, nproc, script, steps, env, conf=conf)
    codes = wait_all(started, WAIT)
    assert codes == [0] * nodes, f"{ours} {codes}\n{last_words(started)}"
    ranks: dict[int, tuple[float, ...]] = {}
    for path in steps.glob("step-*"):
        began, stepped, used, at_script, imported, beat = (
            float(x) for x in path.read_text().split()
        )
        # the rank's CPU in three parts: to its script, import torch, init + barrier; and
        # what safelaunch's heartbeat thread used of it
        split = (at_script, imported - at_script, used - imported, beat)
        ranks[int(path.name.split("-")[1])] = (began, stepped, used, *split)
    rows = []
    for node in started:
        placed = node.first(": ranks ") if ours else node.first("Rendezvous complete for workers")
        mine = _node_ranks(node, ranks, nproc)
        first_rank = min(r[0] for r in mine)
        joined = ops = float("nan")
        if ours:
            said = next(line for _, line in node.lines if ": ranks " in line)
            number = int(said.split("node ", 1)[1].split()[0])
            spawn = steps / f"store-{number}-attempt0.json"
            if spawn.exists():  # not written by a safelaunch before it (a comparison)
                counts = json.loads(spawn.read_text())
                joined = (placed or 0) - counts["joined"]
                ops = sum(entry[0] for entry in counts["ops"].values())
        parts = [sum(r[i] for r in mine) for i in (3, 4, 5, 6)]
        rows.append(
            (node.cpu, sum(r[2] for r in mine), ops, joined, first_rank - (placed or 0), *parts)
        )
    medians = [statistics.median(row[i] for row in rows) for i in range(9)]
    return [*medians, max(r[1] for r in ranks.values()) - begun]


def _node_ranks(
    node: Node, ranks: dict[int, tuple[float, ...]], nproc: int
) -> list[tuple[float, ...]]:
    """This launcher's ranks, by the base rank it printed (safelaunch) or its group rank."""
    for _, line in node.lines:
        if ": ranks " in line:  # safelaunch: node k of N (host): ranks B-E of W
            base = int(line.split(": ranks ", 1)[1].split("-")[0])
            return [ranks[r] for r in range(base, base + nproc)]
        if "group_rank=" in line:  # torchrun's INFO record
            group = int(line.split("group_rank=", 1)[1].split()[0])
            return [ranks[r] for r in range(group * nproc, group * nproc + nproc)]
    raise AssertionError("no placement line:\n" + "\n".join(ln for _, ln in node.lines[-20:]))


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
        ends = [p for p in counts.glob("store-*.json") if "-attempt" not in p.name]
        records = [json.loads(p.read_text()) for p in ends]  # not the counts before a spawn
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


def launcher_share(ours: bool, ranks: int, workers: int, seconds: float, where: Path) -> float:
    """% of a core the launcher process itself used (all its threads, not its children)
    over `seconds` of a healthy job, once every rank has stepped."""
    script = where.parent / "train.py"
    script.write_text(TRAIN)
    where.mkdir()
    env = {**os.environ, "STEP_DIR": str(where), "WORKERS_": str(workers)}
    argv = [*(SAFELAUNCH if ours else TORCHRUN), f"--nproc-per-node={ranks}", str(script)]
    node = Node(argv, where, env)
    deadline = time.monotonic() + WAIT
    while len(list(where.glob("ready-*"))) < ranks:
        if node.proc.poll() is not None or time.monotonic() > deadline:
            node.wait(1)
            raise SystemExit(f"{argv} did not start:\n{last_words([node])}")
        time.sleep(0.2)
    time.sleep(2)  # past the start: every rank steps
    before, at = cpu_seconds(node.proc.pid), time.monotonic()
    time.sleep(seconds)
    share = 100 * (cpu_seconds(node.proc.pid) - before) / (time.monotonic() - at)
    (where / "stop").touch()
    code = node.wait(120)
    assert code == 0, f"{argv}: exit {code}\n{last_words([node])}"
    return share


def cpu(ranks_list: list[int], workers_list: list[int], seconds: float, tmp: Path) -> None:
    """The launcher's own CPU over a grid of ranks x DataLoader workers, both launchers in
    turns in each cell; per rank, and per process (ranks and their workers)."""
    print(
        f"\nlauncher CPU, 1 node, healthy job (gloo all-reduce every batch), {seconds:g} s window"
    )
    print(
        f"{'ranks':>5} {'workers':>7} {'safelaunch':>10} {'/rank':>7} {'/process':>8}"
        f" {'torchrun':>8} {'/rank':>7} {'/process':>8} {'ratio':>5}  load"
    )
    found: dict[tuple[int, int], float] = {}
    for ranks in ranks_list:
        for workers in workers_list:
            shares = {}
            for ours in (True, False):
                where = tmp / f"cpu-{ranks}-{workers}-{ours}"
                shares[ours] = launcher_share(ours, ranks, workers, seconds, where)
            found[ranks, workers] = shares[True]
            procs = ranks * (1 + workers)
            one, five, _ = os.getloadavg()
            print(
                f"{ranks:>5} {workers:>7} {shares[True]:>9.2f}% {shares[True] / ranks:>6.3f}%"
                f" {shares[True] / procs:>7.4f}% {shares[False]:>7.2f}%"
                f" {shares[False] / ranks:>6.3f}% {shares[False] / procs:>7.4f}%"
                f" {shares[True] / max(shares[False], 1e-9):>5.2f}  {one:.1f} {five:.1f}",
                flush=True,
            )
    flat(found)


def flat(found: dict[tuple[int, int], float]) -> None:
    """Least squares: share = fixed + per_rank x R + per_worker x R x W; flat when the
    share per rank does not grow with the ranks or the workers (<= 1 % of a core a rank)."""
    import numpy

    keys = list(found)
    design = numpy.array([[1.0, r, r * w] for r, w in keys])
    shares = numpy.array([found[key] for key in keys])
    (fixed, per_rank, per_worker), *_ = numpy.linalg.lstsq(design, shares, rcond=None)
    per_rank_share = {key: share / key[0] for key, share in found.items()}
    worst = max(per_rank_share.values())
    print(
        f"fit: {fixed:.3f}% fixed + {per_rank:.4f}% a rank + {per_worker:.5f}% a rank's worker;"
        f" the largest share per rank {worst:.3f}% (target <= 1 %): "
        + ("flat" if per_worker <= 0.01 and worst <= 1.0 else "NOT flat")
    )


def _ints(text: str) -> list[int]:
    return [int(n) for n in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--what", default="rdzv,start,store,verdict,cpu")
    parser.add_argument("--nodes", default="2,4,8,16")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--kinds", default="hang,fail,lost", help="verdict: which faults")
    parser.add_argument(
        "--slow", action="store_true", help="torch's keep-alive (5 s x 3), not FAST (1 s x 3)"
    )
    parser.add_argument("--smoke", action="store_true", help="10 s windows")
    parser.add_argument("--ranks", default="2,4,8", help="cpu: ranks a node")
    parser.add_argument("--workers", default="0,2,4", help="cpu: DataLoader workers a rank")
    args = parser.parse_args()
    seconds = 10.0 if args.smoke else args.seconds
    nodes_list = [int(n) for n in args.nodes.split(",")]
    conf = None if args.slow else FAST
    print(f"keep-alive: {'torch defaults' if conf is None else conf}")
    # As a pip install runs: byte-compiled. This machine's shells set
    # PYTHONDONTWRITEBYTECODE=1, and an editable install then compiles safelaunch's
    # modules in every launcher and rank (~10 ms of CPU a rank, more in the launcher);
    # torch's, installed, are compiled.
    import compileall

    import safelaunch

    compileall.compile_dir(Path(safelaunch.__file__).parent, quiet=1)
    with tempfile.TemporaryDirectory() as where:
        tmp = Path(where)
        for what in args.what.split(","):
            if what == "rdzv":
                rdzv(nodes_list, args.nproc, args.repeat, tmp, conf)
            elif what == "start":
                start(nodes_list, args.nproc, args.repeat, tmp, conf)
            elif what == "store":
                store(nodes_list, args.nproc, seconds, tmp, conf)
            elif what == "verdict":
                verdict(nodes_list, args.nproc, tmp, args.kinds, conf)
            elif what == "cpu":
                cpu(_ints(args.ranks), _ints(args.workers), seconds, tmp)


if __name__ == "__main__":
    main()
