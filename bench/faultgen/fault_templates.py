"""The training scripts faults are injected into: four real loops, written with slots.

Every template is a whole script (CPU, Gloo) plus a helper module beside it. A line may
end in a slot annotation that the generator (fault_gen.py) reads and strips:

    #@slot LAYER WHEN   a fault statement may go before this line; LAYER says where the
                        line is (forward, getitem, loss, optim, helper-model,
                        helper-data, data, loop), WHEN the expression that is the step
    #@coll GROUP        a collective over GROUP (world, tp, dp): it may be skipped,
                        doubled, or called with another size or dtype
    #@p2p WHO           a send that may be skipped, run by rank 0 (first) or the rest
    #@cycle             where every stage may receive first (the ring of the pipeline)
    #@linger            where a lingering thread's body goes (module level)
    #@end               the script's last line

The loops run STEPS steps of a tiny model; nothing in them fails without a fault.
"""

from __future__ import annotations

import fault_templates_wide as wide

HELPERS = '''\
"""The script's helper module: small transforms called from the model and the data."""

import os
import time


def _moment():
    path = os.environ.get("FAULTGEN_MOMENT")
    if path:
        with open(path, "a") as out:
            out.write(f"{time.time()}\\n")
    return True


def rescale(h, rank, when):
    scale = 0.5  #@slot helper-model when
    return h * scale + 0.1


def decode(x, rank, when):
    offset = 0.25  #@slot helper-data when
    return x - offset
'''

_PRELUDE = '''\
"""A generated training loop ({name}); faultgen seed {seed}."""

import datetime
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

import helpers

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
STEPS = {steps}
BATCH = 4
WORKERS = {workers}
STEP = [0]


def _moment():
    path = os.environ.get("FAULTGEN_MOMENT")
    if path:
        with open(path, "a") as out:
            out.write(f"{{time.time()}}\\n")
    return True


#@linger
class Net(torch.nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.fc1 = torch.nn.Linear(width, 16)
        self.fc2 = torch.nn.Linear(16, 2)

    def forward(self, x):
        h = torch.relu(self.fc1(x))  #@slot forward STEP[0]
        h = helpers.rescale(h, RANK, STEP[0])
        return self.fc2(h)


class Shards(Dataset):
    def __len__(self):
        return BATCH * STEPS

    def __getitem__(self, index):
        x = torch.full((8,), float(index % 7) / 7 + RANK)  #@slot getitem index // BATCH
        x = helpers.decode(x, RANK, index // BATCH)
        return x, torch.stack([x.sum(), x.mean()])


def loss_fn(out, target):
    diff = out - target  #@slot loss STEP[0]
    return (diff * diff).mean()


class Optim(torch.optim.SGD):
    def step(self, closure=None):
        result = super().step(closure)  #@slot optim STEP[0]
        return result


def next_batch(batches, step):
    batch = next(batches)  #@slot data step
    return batch


dist.init_process_group("gloo", timeout=datetime.timedelta(seconds={timeout}))
'''

_STATS = """\
        stats = torch.stack([loss.detach(), torch.tensor(float(step))])  #@slot loop step
        dist.all_reduce(stats)  #@coll world
"""

_END = """\


train()
dist.destroy_process_group()
#@end
"""

DDP_LOOP = (
    """\
def train():
    model = DDP(Net())
    opt = Optim(model.parameters(), lr=0.01)
    batches = iter(DataLoader(Shards(), batch_size=BATCH, num_workers=WORKERS))
    for step in range(STEPS):
        STEP[0] = step
        x, y = next_batch(batches, step)
        out = model(x)  #@slot loop step
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
"""
    + _STATS
)

# DataLoader workers, gradients averaged by hand (no DDP)
LOADER_LOOP = (
    """\
def train():
    model = Net()
    opt = Optim(model.parameters(), lr=0.01)
    batches = iter(DataLoader(Shards(), batch_size=BATCH, num_workers=WORKERS))
    for step in range(STEPS):
        STEP[0] = step
        x, y = next_batch(batches, step)
        loss = loss_fn(model(x), y)  #@slot loop step
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)  #@coll world
        opt.step()  #@slot loop step
        opt.zero_grad()
"""
    + _STATS
)

# tensor parallel pairs {0,1},{2,3} (new_subgroups), data parallel {0,2},{1,3} (new_group)
SUBGROUP_LOOP = (
    """\
def train():
    tp, _ = dist.new_subgroups(group_size=2)
    dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    dp = dp_groups[RANK % 2]
    model = Net()
    opt = Optim(model.parameters(), lr=0.01)
    batches = iter(DataLoader(Shards(), batch_size=BATCH, num_workers=WORKERS))
    for step in range(STEPS):
        STEP[0] = step
        x, y = next_batch(batches, step)
        out = model(x)  #@slot loop step
        partial = out.detach().clone()
        dist.all_reduce(partial, group=tp)  #@coll tp
        loss = loss_fn(out + (partial / 2 - out).detach(), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, group=dp)  #@coll dp
        opt.step()  #@slot loop step
        opt.zero_grad()
"""
    + _STATS
)

# a ring of stages: each sends its activations on; the last stage's go back to stage 0
PIPELINE_LOOP = (
    """\
def train():
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    model = Net()
    opt = Optim(model.parameters(), lr=0.01)
    batches = iter(DataLoader(Shards(), batch_size=BATCH, num_workers=WORKERS))
    for step in range(STEPS):
        STEP[0] = step
        x, y = next_batch(batches, step)
        got = torch.zeros(BATCH, 8)  #@slot loop step
        #@cycle
        if RANK == 0:
            dist.send(x.contiguous(), nxt)  #@p2p first
            dist.recv(got, prv)
        else:
            dist.recv(got, prv)
            dist.send((got * 0.5).contiguous(), nxt)  #@p2p rest
        loss = loss_fn(model(x if RANK == 0 else got), y)  #@slot loop step
        loss.backward()
        opt.step()
        opt.zero_grad()
"""
    + _STATS
)

LOOPS = {
    "ddp": DDP_LOOP,
    "loader": LOADER_LOOP,
    "subgroups": SUBGROUP_LOOP,
    "pipeline": PIPELINE_LOOP,
}
WORLDS = {"ddp": (2, 3), "loader": (2,), "subgroups": (4,), "pipeline": (2, 3)}
WORKER_COUNTS = {"ddp": 0, "loader": 2, "subgroups": 0, "pipeline": 0}
GROUPS = {  # members of each group a rank is in, by group name
    "world": lambda rank, world: tuple(range(world)),
    "tp": lambda rank, world: (rank - rank % 2, rank - rank % 2 + 1),
    "dp": lambda rank, world: (rank % 2, rank % 2 + 2),
}


def script(name: str, seed: int, steps: int, timeout: int) -> str:
    """The template's whole script text, its slots still annotated (a wide suite's
    template: fault_templates_wide.py's loop after the same prelude)."""
    workers = WORKER_COUNTS[name] if name in LOOPS else wide.WORKER_COUNTS[name]
    prelude = _PRELUDE.format(name=name, seed=seed, steps=steps, workers=workers, timeout=timeout)
    if name in wide.LOOPS:
        return wide.script(name, prelude) + _END
    return prelude + "\n\n" + LOOPS[name] + _END
