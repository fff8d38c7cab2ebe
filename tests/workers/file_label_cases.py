"""Faults in the files a job reads or writes, its labels and devices, 2 Gloo ranks each; CASE
picks one (rank 1 is the culprit unless said otherwise).

worker_keyerror: a Dataset's __getitem__ raises KeyError in a DataLoader worker (num_workers=2)
corrupt_ckpt: torch.load of a truncated checkpoint file
recursion: model code recurses without end (RecursionError)
exit0: the rank calls os._exit(0) mid-loop while rank 0 waits in all_reduce
metrics: rank 0's metrics code (json.dumps of a tensor) raises after a collective
dtype: rank 1 all-reduces int64 where rank 0 all-reduces float32
bare_assert: an assert with no message in the train step
kbint: KeyboardInterrupt raised inside the rank
bcast_shape: rank 1 receives a broadcast into a smaller tensor
state_dict: load_state_dict with a size mismatch (the rank built a wider layer)
target_oob: cross_entropy with a label out of range
no_grad: backward() of a loss that does not require grad
save_dir: torch.save into a directory that does not exist
cannot_import: `from torch.utils import <missing>` inside a function at step 2
meta_device: a buffer left on the meta device meets a CPU tensor
"""

import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

CASE = os.environ["CASE"]


class Shard(Dataset):
    def __init__(self, rank):
        self.rows = {i: float(i) for i in range(64) if not (rank == 1 and i == 21)}

    def __len__(self):
        return 64

    def __getitem__(self, index):
        return torch.tensor(self.rows[index])


def worker_keyerror(rank):
    for batch in DataLoader(Shard(rank), batch_size=4, num_workers=2):
        dist.all_reduce(batch)


def corrupt_ckpt(rank):
    path = os.path.join(tempfile.mkdtemp(), "last.pt")
    torch.save({"w": torch.ones(64)}, path)
    if rank == 1:
        with open(path, "r+b") as ckpt:
            ckpt.truncate(40)
    state = torch.load(path)
    dist.all_reduce(state["w"])


def depth(node, level):
    return depth(node, level + 1) + 1 if node else level


def recursion(rank):
    for step in range(3):
        dist.all_reduce(torch.ones(4))
        if rank == 1 and step == 1:
            depth({"child": {}}, 0)


def exit0(rank):
    for step in range(20):
        if rank == 1 and step == 3:
            os._exit(0)
        dist.all_reduce(torch.ones(8))


def metrics(rank):
    for step in range(5):
        loss = torch.tensor(0.5)
        dist.all_reduce(loss)
        if rank == 0 and step == 2:
            print(json.dumps({"step": step, "loss": loss}))


def dtype(rank):
    for _ in range(3):
        grads = torch.ones(16, dtype=torch.int64 if rank == 1 else torch.float32)
        dist.all_reduce(grads)


def bare_assert(rank):
    for step in range(4):
        grads = torch.ones(4) * (step if rank == 1 else 1)
        assert grads.min() > 0
        dist.all_reduce(grads)


def kbint(rank):
    for step in range(6):
        if rank == 1 and step == 2:
            raise KeyboardInterrupt
        dist.all_reduce(torch.ones(4))


def bcast_shape(rank):
    weights = torch.zeros(6 if rank == 1 else 8)
    dist.broadcast(weights, src=0)


def state_dict(rank):
    saved = torch.nn.Linear(4, 8).state_dict()
    model = torch.nn.Linear(4, 16 if rank == 1 else 8)
    model.load_state_dict(saved)
    dist.all_reduce(torch.ones(1))


def target_oob(rank):
    logits = torch.randn(4, 10)
    labels = torch.tensor([1, 2, 3, 10 if rank == 1 else 4])
    loss = F.cross_entropy(logits, labels)
    dist.all_reduce(loss)


def no_grad(rank):
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():
        loss = model(torch.ones(2, 4)).sum() if rank == 1 else None
    if loss is None:
        loss = model(torch.ones(2, 4)).sum()
    loss.backward()
    dist.all_reduce(model.weight.grad)


def save_dir(rank):
    folder = os.path.join(tempfile.mkdtemp(), "ckpt")
    if rank == 0:
        os.makedirs(folder)  # only rank 0 makes it; rank 1 saves its shard into it anyway
    dist.all_reduce(torch.ones(4))
    torch.save({"w": torch.ones(2)}, os.path.join(folder, f"shard{rank}.pt"))
    dist.all_reduce(torch.ones(4))


def log_extras(step):
    from torch.utils import tensorboard_extras  # noqa: F401

    return step


def cannot_import(rank):
    for step in range(4):
        dist.all_reduce(torch.ones(4))
        if rank == 1 and step == 2:
            log_extras(step)


def meta_device(rank):
    with torch.device("meta" if rank == 1 else "cpu"):
        scale = torch.ones(4)
    dist.all_reduce(torch.ones(4) * scale)


dist.init_process_group("gloo")
globals()[CASE](dist.get_rank())
if dist.is_initialized():
    dist.destroy_process_group()
sys.exit(0)
