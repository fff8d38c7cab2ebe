"""The call ledger's cost (rank/call_ledger.py), against the heartbeat's budget.

    .venv/bin/python bench/ledger_cost.py [--steps 2000] [--repeat 3]

The heartbeat's budget (bench/hang_detection.py): at most 1% of a rank's time. Measured:
1. Per call, the bookkeeping alone (the real call replaced by a no-op): a blocking
   collective (describe, group name, the user's frame, two write(2): the call and its
   completion) and a blocking p2p call; and a real all_reduce of 4 floats on a one-rank
   Gloo group with and without it. CPU time of the calling thread, not wall time: the
   machine this was written on is shared, and wall time there moved 10x.
2. A tiny DDP job, 2 Gloo ranks: each step a forward, backward (DDP's own all_reduce runs
   in C++, outside the ledger), optimizer step and one Python all_reduce of the loss, as a
   logging loop does; rank 0's CPU time (all its threads) and wall time for the loop,
   with the ledger over without (interleaved, shuffled; the spread shows the noise).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET = 0.01


def _per_call(function, repeat: int) -> float:  # type: ignore[no-untyped-def]
    """CPU seconds a call: on a shared machine far steadier than wall time."""
    start = time.thread_time()
    for _ in range(repeat):
        function()
    return (time.thread_time() - start) / repeat


def per_call(work: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29593", RANK="0", WORLD_SIZE="1")
    import torch
    import torch.distributed as dist

    from safelaunch.rank import call_ledger
    from safelaunch.rundir.calls_file import CallsWriter

    dist.init_process_group("gloo")
    module = sys.modules["torch.distributed.distributed_c10d"]
    ledger = call_ledger.Ledger(module, CallsWriter(str(work / "rank0.calls.log")))
    tensor = torch.ones(4)
    real = module.all_reduce
    module.all_reduce = lambda *a, **k: None  # the bookkeeping alone
    module.send = lambda *a, **k: None
    try:
        collective = call_ledger._collective(ledger, "all_reduce", 0)
        send = call_ledger._p2p(ledger, "send", "dst")
        assert collective is not None
        bookkeeping = _per_call(lambda: collective(tensor), 20_000)
        p2p = _per_call(lambda: send(tensor, 0), 20_000)
    finally:
        module.all_reduce = real
    plain = _per_call(lambda: real(tensor), 5_000)
    wrapped = call_ledger._collective(ledger, "all_reduce", 0)
    assert wrapped is not None
    with_ledger = _per_call(lambda: wrapped(tensor), 5_000)
    print("per call: the ledger's bookkeeping")
    print(f"  blocking collective  {bookkeeping * 1e6:6.1f} us")
    print(f"  blocking send/recv   {p2p * 1e6:6.1f} us")
    print(
        f"  all_reduce(float32[4]) on a 1-rank Gloo group: {plain * 1e6:.1f} us plain, "
        f"{with_ledger * 1e6:.1f} us with the ledger ({with_ledger / plain:.3f}x)"
    )
    dist.destroy_process_group()


def rank_main(steps: int) -> None:
    """One rank of the DDP loop; the ledger on when SAFELAUNCH_CALLS is set."""
    from safelaunch.rank import dist_hooks

    dist_hooks.install()
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(16, 64), torch.randn(16, 1)
    for _ in range(50):  # warm-up
        nn.functional.mse_loss(model(inputs), targets).backward()
    dist.barrier()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        dist.all_reduce(loss.detach())  # the loss, for logging
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"LOOP {time.perf_counter() - start:.6f} {time.process_time() - cpu:.6f}")
    dist.destroy_process_group()


def loop_seconds(work: Path, steps: int, ledger: bool, port: int) -> tuple[float, float]:
    """(wall, CPU) seconds of rank 0's loop."""
    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "OMP_NUM_THREADS": "1",
            "SAFELAUNCH_COMM_FILE": str(work / f"rank{rank}.comm.json"),
        }
        env.pop("SAFELAUNCH_CALLS", None)
        if ledger:
            env["SAFELAUNCH_CALLS"] = str(work / f"rank{rank}.calls.log")
        argv = [sys.executable, __file__, "--rank-loop", str(steps)]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
    out = [p.communicate(timeout=600)[0] for p in procs]
    for path in work.glob("rank*"):
        path.unlink()
    line = next(line for line in out[0].splitlines() if "LOOP" in line).split()
    return float(line[1]), float(line[2])


def per_job(work: Path, steps: int, repeat: int) -> None:
    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    port = 29600
    for _ in range(repeat):  # interleaved in shuffled order, so drift hits both alike
        for ledger in random.sample([False, True], 2):
            port += 1
            times[ledger].append(loop_seconds(work, steps, ledger, port))
    print(
        f"DDP loop, 2 Gloo ranks x {steps} steps, a Python all_reduce a step (median of {repeat})"
    )
    medians = {}
    for ledger, runs in times.items():
        label = "with the ledger" if ledger else "without"
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        medians[ledger] = statistics.median(walls), statistics.median(cpus)
        print(
            f"  {label:<16} wall {medians[ledger][0]:7.3f} s ({min(walls):.3f}-{max(walls):.3f})"
            f"  CPU {medians[ledger][1]:7.3f} s ({min(cpus):.3f}-{max(cpus):.3f})"
        )
    for what, i in (("wall", 0), ("CPU", 1)):
        ratio = medians[True][i] / medians[False][i]
        per_step = (medians[True][i] - medians[False][i]) / steps
        print(f"  {what} ratio {ratio:.4f} ({per_step * 1e6:+.1f} us a step)")
    print(f"  budget: the heartbeat's, {BUDGET:.0%} of a rank's time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rank-loop", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_loop is not None:
        rank_main(args.rank_loop)
        return
    with tempfile.TemporaryDirectory() as tmp:
        per_call(Path(tmp))
        per_job(Path(tmp), args.steps, args.repeat)


if __name__ == "__main__":
    main()
