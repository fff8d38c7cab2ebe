"""The "wide" suite's training loops: what the classic four (fault_templates.py) do not
exercise, written with the same slot annotations (fault_templates.py's docstring), plus:

    #@coll GROUP ARG    ARG: the position of the call's tensor argument (default 0), or
                        `-` for a call without one (a barrier: never resized)
    #@p2p WHO           WHO also `notlast` (ranks 0..W-2) and `notfirst` (ranks 1..W-1)
    #@cycle STATEMENT   the receive every rank makes first, where the loop has no `got, prv`
    #@slot backward S   inside an autograd Function's backward or a gradient hook

- zero: ZeRO/FSDP-like: parameters broadcast from rank 0, all_gather_into_tensor of the
  shards before each forward, reduce_scatter_tensor of the gradients, a barrier (2-4 ranks);
- async_pipe: a LINE of stages (0 -> 1 -> ... -> W-1, no ring), two microbatches, forward
  activations by isend/irecv + wait(), gradients back by batch_isend_irecv and send,
  the loss all_reduced (2-4 ranks);
- grid: a 2 x W/2 layout of 6 or 8 ranks: rows (new_subgroups) all_gather a list of
  activations and all_reduce a norm; columns (new_group) all_reduce the gradients;
- methods: every collective from a class in a helper module (comm.py: deeper stacks):
  broadcast, all_reduce, all_gather into a list, gather to and scatter from rank 0,
  a DataLoader worker (2-4 ranks);
- nosync: DDP with no_sync() gradient accumulation (DDP's C++ all_reduce is in no Python
  ledger) and a Python all_reduce of the gradient norms (2-3 ranks).

Every model is GradNet: a custom autograd Function and a gradient hook in its backward.
"""

from __future__ import annotations

COMM = "comm.py"

COMM_MODULE = '''\
"""The job's collectives behind a class: every call two or three frames below the loop."""

import torch
import torch.distributed as dist
from helpers import _moment


class Comm:
    def __init__(self):
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()

    def sync_params(self, model):
        for p in model.parameters():
            dist.broadcast(p.data, src=0)

    def average(self, grads, step):
        for g in grads:
            self._reduce(g, step)

    def _reduce(self, g, step):
        rank = self.rank
        dist.all_reduce(g)  #@coll world
        g /= self.size

    def gather_losses(self, loss, step):
        rank = self.rank
        parts = [torch.zeros_like(loss) for _ in range(self.size)] if rank == 0 else None
        dist.gather(loss, parts, dst=0)  #@coll world
        return torch.stack(parts).mean(0) if rank == 0 else loss

    def scatter_scale(self, mean, step):
        rank = self.rank
        mine = torch.zeros(2)
        chunks = [mean * (i + 1) for i in range(self.size)] if rank == 0 else None
        dist.scatter(mine, chunks, src=0)  #@coll world
        return mine

    def all_losses(self, loss, step):
        rank = self.rank
        parts = [torch.zeros_like(loss) for _ in range(self.size)]
        dist.all_gather(parts, loss)  #@coll world 1
        return torch.stack(parts)
'''

EXTRA = """\


class ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, grad):
        scaled = grad * 1.0  #@slot backward STEP[0]
        return scaled


def clip_hook(grad):
    clipped = grad.clamp(-10.0, 10.0)  #@slot backward STEP[0]
    return clipped


class GradNet(Net):
    def __init__(self, width=8):
        super().__init__(width)
        self.fc1.weight.register_hook(clip_hook)

    def forward(self, x):
        return ScaleGrad.apply(super().forward(x))
"""

_WORLD_STATS = """\
        stats = torch.stack([loss.detach(), torch.tensor(float(step))])  #@slot loop step
        dist.all_reduce(stats)  #@coll world
"""

ZERO_LOOP = (
    """\
def flat_grads(model, pad):
    return torch.cat([p.grad.flatten() for p in model.parameters()] + [torch.zeros(pad)])


def train():
    model = GradNet()
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    n = sum(p.numel() for p in model.parameters())
    pad = (-n) % WORLD
    size = (n + pad) // WORLD
    flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    flat = torch.cat([flat, torch.zeros(pad)])
    shard = flat[RANK * size : (RANK + 1) * size].clone().requires_grad_()
    opt = Optim([shard], lr=0.01)
    batches = iter(DataLoader(Shards(), batch_size=BATCH, num_workers=WORKERS))
    for step in range(STEPS):
        STEP[0] = step
        x, y = next_batch(batches, step)
        full = torch.zeros(size * WORLD)
        dist.all_gather_into_tensor(full, shard.detach())  #@coll world 1
        torch.nn.utils.vector_to_parameters(full[:n], model.parameters())
        loss = loss_fn(model(x), y)  #@slot loop step
        loss.backward()
        grad_shard = torch.zeros(size)
        dist.reduce_scatter_tensor(grad_shard, flat_grads(model, pad))  #@coll world 1
        shard.grad = grad_shard / WORLD
        opt.step()
        opt.zero_grad()
        model.zero_grad()
        dist.barrier()  #@coll world -
"""
    + _WORLD_STATS
)

ASYNC_PIPE_LOOP = """\
def stage(model, inp):
    return inp * 0.5 + model(inp).mean(1, keepdim=True)


def train():
    model = GradNet()
    opt = Optim(model.parameters(), lr=0.01)
    batches = iter(DataLoader(Shards(), batch_size=BATCH, num_workers=WORKERS))
    last = RANK == WORLD - 1
    for step in range(STEPS):
        STEP[0] = step
        x, y = next_batch(batches, step)
        kept = []  #@slot loop step
        #@cycle dist.recv(torch.zeros(2), (RANK - 1) % WORLD)
        for xm, ym in zip(x.chunk(2), y.chunk(2)):
            inp = xm.clone()
            if RANK > 0:
                dist.irecv(inp, RANK - 1).wait()
            inp.requires_grad_()
            out = model(inp) if last else stage(model, inp)
            if not last:
                dist.isend(out.detach().contiguous(), RANK + 1).wait()  #@p2p notlast
            kept.append((inp, out, ym))
        total = torch.zeros(())
        for inp, out, ym in reversed(kept):
            if last:
                loss = loss_fn(out, ym)
                total = total + loss.detach()
                loss.backward()
            else:
                grad = torch.zeros_like(out)
                [w.wait() for w in dist.batch_isend_irecv([dist.P2POp(dist.irecv, grad, RANK + 1)])]
                out.backward(grad)
            if RANK > 0:
                dist.send(inp.grad.contiguous(), RANK - 1)  #@p2p notfirst
        opt.step()
        opt.zero_grad()
        stats = torch.stack([total, torch.tensor(float(step))])  #@slot loop step
        dist.all_reduce(stats)  #@coll world
"""

GRID_LOOP = (
    """\
def train():
    tp = WORLD // 2
    row, _ = dist.new_subgroups(group_size=tp)
    cols = [dist.new_group([c, c + tp]) for c in range(tp)]
    col = cols[RANK % tp]
    model = GradNet()
    opt = Optim(model.parameters(), lr=0.01)
    batches = iter(DataLoader(Shards(), batch_size=BATCH, num_workers=WORKERS))
    for step in range(STEPS):
        STEP[0] = step
        x, y = next_batch(batches, step)
        out = model(x)  #@slot loop step
        parts = [torch.zeros_like(out) for _ in range(tp)]
        dist.all_gather(parts, out.detach().contiguous(), group=row)  #@coll row 1
        loss = loss_fn(out + (torch.stack(parts).mean(0) - out).detach(), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, group=col)  #@coll col
        opt.step()  #@slot loop step
        opt.zero_grad()
        norm = torch.stack([loss.detach(), loss.detach() * 2])
        dist.all_reduce(norm, group=row)  #@coll row
"""
    + _WORLD_STATS
)

METHODS_LOOP = (
    """\
import comm


def train():
    model = GradNet()
    world = comm.Comm()
    world.sync_params(model)
    opt = Optim(model.parameters(), lr=0.01)
    batches = iter(DataLoader(Shards(), batch_size=BATCH, num_workers=WORKERS))
    for step in range(STEPS):
        STEP[0] = step
        x, y = next_batch(batches, step)
        loss = loss_fn(model(x), y)  #@slot loop step
        loss.backward()
        world.average([p.grad for p in model.parameters()], step)
        opt.step()
        opt.zero_grad()
        pair = torch.stack([loss.detach(), loss.detach() + 1])
        scale = world.scatter_scale(world.gather_losses(pair, step), step)
        seen = world.all_losses(pair * scale, step)  #@slot loop step
"""
    + _WORLD_STATS
)

NOSYNC_LOOP = (
    """\
def train():
    model = DDP(GradNet())
    opt = Optim(model.parameters(), lr=0.01)
    batches = iter(DataLoader(Shards(), batch_size=BATCH, num_workers=WORKERS))
    for step in range(STEPS):
        STEP[0] = step
        x, y = next_batch(batches, step)
        xs, ys = x.chunk(2), y.chunk(2)
        with model.no_sync():
            loss_fn(model(xs[0]), ys[0]).backward()  #@slot loop step
        loss = loss_fn(model(xs[1]), ys[1])
        loss.backward()
        norms = torch.stack([p.grad.norm() for p in model.parameters()])
        dist.all_reduce(norms)  #@coll world
        opt.step()
        opt.zero_grad()
"""
    + _WORLD_STATS
)

LOOPS = {
    "zero": ZERO_LOOP,
    "async_pipe": ASYNC_PIPE_LOOP,
    "grid": GRID_LOOP,
    "methods": METHODS_LOOP,
    "nosync": NOSYNC_LOOP,
}
WORLDS = {"zero": (2, 3, 4), "async_pipe": (2, 3, 4), "grid": (6, 8), "methods": (2, 3, 4),
          "nosync": (2, 3)}  # fmt: skip
WORKER_COUNTS = {"zero": 0, "async_pipe": 0, "grid": 0, "methods": 1, "nosync": 1}
MODULES = {"methods": {COMM: COMM_MODULE}}  # helper modules beside the script
GROUPS = {  # a 2 x W/2 grid: rows of W/2 ranks, columns of two
    "row": lambda rank, world: tuple(range(rank - rank % (world // 2), world)[: world // 2]),
    "col": lambda rank, world: (rank % (world // 2), rank % (world // 2) + world // 2),
}


def script(name: str, prelude: str) -> str:
    """The template's whole script text after the classic prelude, its slots annotated."""
    return prelude + EXTRA + "\n\n" + LOOPS[name]
