"""The cost of collective forensics and straggler measurement, against the heartbeat's budget.

    .venv/bin/python bench/stragglers.py

The heartbeat's budget (bench/hang_detection.py): at most 1% of a rank's time at its
most frequent rate (a sample every 0.2 s). Measured here:
1. Per sample: counting the sampled stack's phase (data / compute / collective) and
   place, on a 30-frame stack, against the sample itself (stack walk + atomic JSON write).
2. Per job: the flight record a rank writes at destroy_process_group (2000 entries, a
   one-rank Gloo group in this process) and on the dump signal.
3. In the launcher: reading 8 ranks' records of 2000 collectives and finding the straggler.
4. Per p2p call: the bookkeeping of a blocking send/recv (who waits on whom).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from safelaunch.diagnose import stragglers
from safelaunch.rank import beat
from safelaunch.rank import flight_recorder as flight
from safelaunch.rank.phases import Phases

RATE = 0.2  # seconds between samples at the fastest heartbeat
BUDGET = 0.01  # of a rank's time


def _per_call(function, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        function()
    return (time.perf_counter() - start) / repeat


def _deep(depth: int):
    if depth:
        return _deep(depth - 1)
    return [(f"/home/me/train{i}.py", i, f"step_{i}") for i in range(30)]


def per_sample(work: Path) -> None:
    frames = _deep(0)
    phases = Phases()
    added = _per_call(lambda: phases.add(frames), 20_000)
    beater = beat.Beater(str(work / "rank0.json"), RATE, __import__("threading").get_ident())
    sample = _per_call(beater.beat, 2_000)
    print("per heartbeat sample (30-frame stack)")
    print(f"  the sample itself            {sample * 1e6:8.1f} us")
    print(f"  + phase and place counting   {added * 1e6:8.1f} us ({added / sample:.1%} of it)")
    print(f"  at one sample every {RATE} s, the counting: {added / RATE:.4%} of the rank's time")
    share = (sample + added) / RATE
    print(f"  the whole sample with it: {share:.4%} (budget {BUDGET:.0%}; machine load moves this)")


def per_job(work: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29591", RANK="0", WORLD_SIZE="1")
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(16)
    for _ in range(2000):
        dist.all_reduce(tensor)
    flight._directory = str(work / "flight")
    took = _per_call(lambda: flight.dump("bench"), 20)
    size = (work / "flight" / "rank0.json").stat().st_size
    print("per job: the flight record (2000 collectives)")
    print(f"  written in {took * 1000:.1f} ms ({size / 1e6:.2f} MB), once at the end of a job")
    dist.destroy_process_group()


def launcher(work: Path) -> None:
    record = json.loads((work / "flight" / "rank0.json").read_text())
    directory = work / "eight"
    directory.mkdir()
    for rank in range(8):
        copy = dict(record)
        copy["safelaunch"] = dict(
            record["safelaunch"],
            rank=rank,
            pg_config={"0": {"desc": "default_pg", "ranks": str(list(range(8)))}},
        )
        copy["entries"] = [
            dict(e, time_created_ns=e["time_created_ns"] + rank * 1000) for e in record["entries"]
        ]
        (directory / f"rank{rank}.json").write_text(json.dumps(copy))
    took = _per_call(lambda: stragglers.analyse(stragglers.read_records(directory)), 3)
    print("in the launcher: 8 ranks x 2000 collectives")
    print(f"  arrival order and straggler in {took * 1000:.0f} ms (after the job, no torch import)")


def per_p2p() -> None:
    module = sys.modules["torch.distributed.distributed_c10d"]
    flight._directory = flight._directory or "unused"
    real = module.send
    module.send = lambda *a, **k: None  # the bookkeeping alone, not Gloo's send
    wrapped = flight._blocking(module, "send", "dst")
    try:
        cost = _per_call(lambda: wrapped(__import__("torch").ones(4), 1), 20_000)
    finally:
        module.send = real
    print(f"per blocking send/recv: {cost * 1e6:.1f} us of bookkeeping (a Gloo send: ~100 us+)")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        per_sample(work)
        per_job(work)
        launcher(work)
        per_p2p()


if __name__ == "__main__":
    main()
