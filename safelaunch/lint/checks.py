"""How each lint rule sees its mistake: one generator per rule, over a parsed Script.

Each yields the calls where the mistake is; rules.py gives them names, why and fix.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator

from safelaunch.lint.gradients import reduces_gradients
from safelaunch.lint.scan import Call, Script, global_rank, under_rank_condition

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
)
SET_DEVICE = ("set_device", "set_device_index")
# Frameworks that wrap, place and synchronise the model themselves.
FRAMEWORKS = (
    "deepspeed",
    "accelerate",
    "lightning",
    "pytorch_lightning",
    "horovod",
    "colossalai",
    "megatron",
    "torch.distributed.fsdp",
    "torch.distributed.tensor",
    "torch.distributed.pipelining",
    "torch.distributed.rpc",
    "torch.distributed._composable",
)


def _constant(node: ast.expr | None, value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def _sampler_names(script: Script) -> set[str]:
    """Names bound to a DistributedSampler(...) anywhere in the script."""
    found = set()
    for call in script.called("DistributedSampler"):
        parent = script.parents.get(call.node)
        if isinstance(parent, ast.Assign):
            found |= {t.id for t in parent.targets if isinstance(t, ast.Name)}
    return found


def sampler_with_shuffle(script: Script) -> Iterator[ast.Call]:
    samplers = _sampler_names(script)
    for call in script.called("DataLoader"):
        sampler = call.keyword("sampler")
        if sampler is None or not _constant(call.keyword("shuffle"), True):
            continue
        is_distributed = (isinstance(sampler, ast.Name) and sampler.id in samplers) or (
            isinstance(sampler, ast.Call)
            and any(c.node is sampler for c in script.called("DistributedSampler"))
        )
        if is_distributed:
            yield call.node


def _epoch_loop(script: Script) -> bool:
    for node in script.loops:
        if isinstance(node.target, ast.Name) and "epoch" in node.target.id.lower():
            return True
        if any(isinstance(parent, ast.For) for parent in script.ancestors(node)):
            return True  # a loop inside a loop
    return False


def _only_given_to_a_loader(script: Script, call: Call) -> bool:
    """The sampler goes straight into a DataLoader and nowhere else (no helper could set_epoch)."""
    parent = script.parents.get(call.node)
    if isinstance(parent, ast.keyword):  # DataLoader(..., sampler=DistributedSampler(...))
        return True
    if not isinstance(parent, ast.Assign) or len(parent.targets) != 1:
        return False
    target = parent.targets[0]
    if not isinstance(target, ast.Name):
        return False
    uses = [node for node in script.uses.get(target.id, ()) if node is not target]
    loaders = {id(c.keyword("sampler")) for c in script.called("DataLoader")}
    return bool(uses) and all(id(use) in loaders for use in uses)


def sampler_without_set_epoch(script: Script) -> Iterator[ast.Call]:
    if "set_epoch" in script.attributes or not _epoch_loop(script):
        return
    for call in script.called("DistributedSampler"):
        if _constant(call.keyword("shuffle"), False):
            continue  # no shuffle: the order is the same every epoch by design
        if _only_given_to_a_loader(script, call):
            yield call.node


def loader_not_sharded(script: Script) -> Iterator[ast.Call]:
    if not script.distributed or script.called("DistributedSampler"):
        return
    if any("shard" in name.lower() or "split_dataset_by_node" in name for name in script.names):
        return
    for call in script.called("DataLoader"):
        unsharded = call.keyword("sampler") is None and call.keyword("batch_sampler") is None
        if unsharded and _constant(call.keyword("shuffle"), True):
            yield call.node


def model_not_wrapped(script: Script) -> Iterator[ast.Call]:
    # Only what averages the gradients stands for DDP: a wrapper, a framework that wraps,
    # or the script's own reduction of them (a barrier or a loss all_reduce does not).
    if script.wrapped() or script.imports_any(*FRAMEWORKS) or not script.called("backward"):
        return
    if reduces_gradients(script):
        return
    for call in script.called("init_process_group"):
        yield call.node


def _implicit_cuda(call: Call) -> bool:
    """`.cuda()`, `.to("cuda")`, `torch.device("cuda")`, `device="cuda"`: the current device."""
    if call.last == "cuda" and not call.node.args and not call.node.keywords:
        return call.name != "torch.cuda"
    args = [*call.node.args, *(k.value for k in call.node.keywords if k.arg == "device")]
    if call.last in ("to", "device") or call.keyword("device") is not None:
        return any(isinstance(a, ast.Constant) and a.value == "cuda" for a in args)
    return False


def set_device_missing(script: Script) -> Iterator[ast.Call]:
    if not script.called("init_process_group") or script.called(*SET_DEVICE):
        return
    first = next((call for call in script.calls if _implicit_cuda(call)), None)
    if first is not None:
        yield first.node


def _device_argument(call: Call) -> ast.expr | None:
    """The device index a call places work on, where it names one."""
    if call.last in SET_DEVICE or call.last == "cuda":
        return call.node.args[0] if call.node.args else None
    if call.last == "device" and len(call.node.args) == 2:  # torch.device("cuda", index)
        return call.node.args[1]
    if call.last == "to" and call.node.args:
        return call.node.args[0]
    ids = call.keyword("device_ids")
    if call.last in ("DistributedDataParallel", "DDP") and isinstance(ids, (ast.List, ast.Tuple)):
        return ids.elts[0] if ids.elts else None
    return None


def device_from_global_rank(script: Script) -> Iterator[ast.Call]:
    for call in script.calls:
        argument = _device_argument(call)
        if argument is not None and global_rank(script, argument, call.scope):
            yield call.node


def collective_under_rank_condition(script: Script) -> Iterator[ast.Call]:
    guarded = [
        (call, branch)
        for call in script.called(*COLLECTIVES)
        if (branch := under_rank_condition(script, call.node)) is not None
    ]
    # The same collective under two rank conditions in one function is the "rank 0 first,
    # then the rest" pattern (`if rank != 0: barrier()` ... `if rank == 0: barrier()`).
    pairs = Counter((id(call.scope), call.last) for call, _ in guarded)
    for call, _ in guarded:
        if pairs[(id(call.scope), call.last)] < 2:
            yield call.node


def batchnorm_without_sync(script: Script) -> Iterator[ast.Call]:
    if not script.wrapped() or "SyncBatchNorm" in script.names | script.attributes:
        return
    for call in script.called("BatchNorm1d", "BatchNorm2d", "BatchNorm3d"):
        yield call.node


def load_without_map_location(script: Script) -> Iterator[ast.Call]:
    if not script.distributed:
        return
    for call in script.called("load"):
        positional = len(call.node.args) >= 2  # torch.load(f, map_location)
        if call.name == "torch.load" and not positional and call.keyword("map_location") is None:
            yield call.node


def find_unused_parameters(script: Script) -> Iterator[ast.Call]:
    for call in script.called("DistributedDataParallel", "DDP"):
        if _constant(call.keyword("find_unused_parameters"), True):
            yield call.node


def cuda_before_init(script: Script) -> Iterator[ast.Call]:
    for init in script.called("init_process_group"):
        before = [
            c for c in script.calls if c.scope is init.scope and c.node.lineno < init.node.lineno
        ]
        if any(c.last in SET_DEVICE for c in before):
            continue
        work = next((c for c in before if _cuda_work(c)), None)
        if work is not None:
            yield work.node


def _cuda_work(call: Call) -> bool:
    """Work that creates a CUDA context on the current device (not queries)."""
    if call.name.startswith("torch.cuda."):
        return call.last not in (
            "is_available",
            "device_count",
            "get_device_name",
            "is_bf16_supported",
        )
    if call.last == "cuda" and call.name != "torch.cuda":
        return True
    device = call.keyword("device") or (
        call.node.args[0] if call.last == "to" and call.node.args else None
    )
    return isinstance(device, ast.Constant) and str(device.value).startswith("cuda")


def spawn_under_launcher(script: Script) -> Iterator[ast.Call]:
    if "LOCAL_RANK" in script.strings or "RANK" in script.strings:
        return  # written for a launcher too (reads its variables)
    for call in script.called("spawn"):
        if call.name == "torch.multiprocessing.spawn":
            yield call.node


def no_destroy(script: Script) -> Iterator[ast.Call]:
    if script.called("destroy_process_group"):
        return
    for call in script.called("init_process_group")[:1]:
        yield call.node
