"""What lint adds to a launch: a script linted cold, and again from the cache.

    .venv/bin/python bench/lint_cost.py [SCRIPT] [--repeat 50]

Without SCRIPT a ~1000-line training-script-like file is generated. The launch pays
the cached figure from its second run of the same script on (docs/lint.md); the
target is a few milliseconds. The preflight cross-check of what the script uses
(preflight/crosscheck.py) over the cached uses is timed too. CPU time is printed beside
the wall time: on a machine with more runnable processes than cores the wall time is
mostly waiting for a core.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from safelaunch.lint import lint_source
from safelaunch.lint.cache import lint_cached
from safelaunch.preflight.crosscheck import cross_check, rank_names

BLOCK = """
def train_{n}(model, loader, sampler, optimizer, epochs, local_rank):
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            x, y = x.to(local_rank), y.to(local_rank)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if dist.get_rank() == 0 and step % 100 == 0:
                print(f"epoch {{epoch}} step {{step}} loss {{loss.item():.4f}}")
        torch.save(model.state_dict(), f"ckpt_{{epoch}}.pt") if dist.get_rank() == 0 else None
"""
HEAD = """import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("script", nargs="?")
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        script = Path(args.script) if args.script else Path(temporary) / "train.py"
        if not args.script:
            script.write_text(HEAD + "".join(BLOCK.format(n=n) for n in range(70)))
        source = script.read_bytes()
        environ = {"SAFELAUNCH_CACHE_DIR": str(Path(temporary) / "cache")}
        cold, cold_cpu = [], []
        for _ in range(args.repeat):
            started, started_cpu = time.perf_counter(), time.process_time()
            lint_source(source, str(script))
            cold.append(time.perf_counter() - started)
            cold_cpu.append(time.process_time() - started_cpu)
        lint_cached(script, environ)  # fill the cache
        warm = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            lint_cached(script, environ)
            warm.append(time.perf_counter() - started)
        uses = lint_cached(script, environ).uses
        checked = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            cross_check(
                uses, script="train.py", gpus=0, torch=None, rank_env=rank_names({}), cwd=Path.cwd()
            )
            checked.append(time.perf_counter() - started)
        lines = source.count(b"\n")
        print(f"{script.name}: {lines} lines")
        print(f"  linted cold:       {statistics.median(cold) * 1000:7.2f} ms (median)")
        print(f"  linted cold, CPU:  {statistics.median(cold_cpu) * 1000:7.2f} ms (median)")
        print(f"  from the cache:    {statistics.median(warm) * 1000:7.2f} ms (median)")
        print(f"  cross-check:       {statistics.median(checked) * 1000:7.3f} ms (median)")


if __name__ == "__main__":
    main()
