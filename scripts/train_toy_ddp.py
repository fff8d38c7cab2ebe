"""A tiny DDP training job: runs on CPU with Gloo, or on GPUs with NCCL when they are there.

    safelaunch --nproc_per_node=2 scripts/train_toy_ddp.py --steps 20

Options to make it fail on purpose (to see what safelaunch reports):
    --fail-rank R --fail-step S   rank R raises at step S
"""

from __future__ import annotations

import argparse
import gc
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-step", type=int, default=-1)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}" if use_cuda else "cpu")
    torch.manual_seed(0)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device),
        device_ids=[device.index] if use_cuda else None,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1234 + rank)  # each rank its own shard
    target_weights = torch.linspace(-1, 1, 16)
    for step in range(args.steps):
        inputs = torch.randn(args.batch, 16, generator=generator)
        targets = (inputs @ target_weights).unsqueeze(1)
        loss = nn.functional.mse_loss(model(inputs.to(device)), targets.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == args.fail_rank and step == args.fail_step:
            raise RuntimeError(f"injected failure on rank {rank} at step {step}")
        if step % 5 == 0 or step == args.steps - 1:
            print(f"step {step:3d} loss {loss.item():.4f} (world size {world})")
    # Release DDP's reducer (it holds Gloo work objects) before the process group goes:
    # left to interpreter shutdown, ~1 run in 5 here ended with "terminate called
    # without an active exception" (SIGABRT) after all work was done; 0 in 60 this way.
    del model, optimizer
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
