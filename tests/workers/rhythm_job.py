"""A Gloo job with a rhythm: quiet steps (a sleep, as a GPU wait looks) and an all_reduce each.

STEP_S: a step's quiet time; STEPS: how many; GROWTH: the step time grows by this
factor a step. Slow but healthy phases, each every *_EVERY steps from step *_FROM:
PAUSE_S: every rank sleeps (an opaque wait, e.g. a collective checkpoint to slow storage);
EVAL_S: rank 0 alone computes while the others wait in a barrier (an evaluation);
SAVE_S: rank 0 writes 1 MiB every 0.1 s while the others wait (a checkpoint save).
HANG_AT: rank HANG_RANK (default 1) sleeps for good at that step, after writing the
wall-clock time to $PIDS_DIR/hang_start.
"""

import os
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def _env(name, default):
    return float(os.environ.get(name, default))


def _due(kind, step):
    every, first = int(_env(kind + "_EVERY", 0)), int(_env(kind + "_FROM", 0))
    return every > 0 and step >= first and (step - first) % every == 0


def _busy(seconds):
    until = time.monotonic() + seconds
    total = 0
    while time.monotonic() < until:
        total += sum(range(1000))
    return total


def _save(seconds):
    until = time.monotonic() + seconds
    with tempfile.TemporaryFile() as out:
        while time.monotonic() < until:
            out.write(b"x" * (1 << 20))
            out.flush()
            os.fsync(out.fileno())
            out.seek(0)
            time.sleep(0.1)


def main():
    dist.init_process_group("gloo", timeout=timedelta(minutes=30))
    rank = dist.get_rank()
    step_s = _env("STEP_S", 0.3)
    hang_at = int(_env("HANG_AT", -1))
    for step in range(int(_env("STEPS", 20))):
        if step == hang_at and rank == int(_env("HANG_RANK", 1)):
            with open(os.path.join(os.environ["PIDS_DIR"], "hang_start"), "w") as out:
                out.write(str(time.time()))
            time.sleep(3600)
        time.sleep(step_s * (1 + _env("GROWTH", 0)) ** step)
        if _due("PAUSE", step):
            time.sleep(_env("PAUSE_S", 0))
        if _due("EVAL", step):
            if rank == 0:
                _busy(_env("EVAL_S", 0))
            dist.barrier()
        if _due("SAVE", step):
            if rank == 0:
                _save(_env("SAVE_S", 0))
            dist.barrier()
        dist.all_reduce(torch.ones(4))
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("done", flush=True)


main()
