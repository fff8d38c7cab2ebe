"""Inside a rank: record which backend the job asked for, and in a Gloo rerun swap it.

torch.distributed.distributed_c10d is patched the moment it loads, before
torch.distributed re-exports its names, so `dist.init_process_group`, `from
torch.distributed import init_process_group`, `new_group` and torch's own callers
(DeviceMesh) all go through the patch. The user's script is never touched.

- Every run: the backend each rank asked for goes to SAFELAUNCH_COMM_FILE (the launcher
  needs it to tell "NCCL failed" from "the program failed").
- Gloo rerun (SAFELAUNCH_FORCE_GLOO): nccl becomes gloo; pg_options (NCCL's) are dropped;
  timeouts the user gave are stretched, Gloo being slower. Python-level collectives on
  the default group are written, one line each, to SAFELAUNCH_COLLECTIVES, so that the
  launcher can compare what each rank called (torch's own check,
  TORCH_DISTRIBUTED_DEBUG=DETAIL, segfaults while constructing DDP in torch 2.13).
"""

from __future__ import annotations

import os
import sys

from safelaunch.rank import call_ledger, flight_recorder, names
from safelaunch.rank.beat import count_optimizer_steps, group_started, left_collectives, rejoined
from safelaunch.rank.call_ledger import COLLECTIVES, describe
from safelaunch.rank.stdlib_standins import suppress, wraps

# The run directory's records are imported where torch.distributed is patched (inside
# torch's own import) or in a rerun: an empty rank never pays for them (bench/per_rank.py).

TYPE_CHECKING = False  # `typing` costs every rank ~2 ms at start; only the checker needs it
if TYPE_CHECKING:
    from collections.abc import Callable
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

    from safelaunch.rundir import ledger_file

TARGET = "torch.distributed.distributed_c10d"
DDP_MODULE = "torch.nn.parallel.distributed"
OPTIMIZER_MODULE = "torch.optim.optimizer"


def gloo_backend(backend: object, has_cuda: bool) -> str:
    """The Gloo equivalent of a backend string: nccl -> cuda:gloo, mixed strings mapped per device.

    `cuda:gloo` keeps NCCL's rule that CPU tensors are refused, so a program that would
    fail on NCCL fails on Gloo too. Without CUDA there are no CUDA tensors to guard:
    plain gloo then runs the CPU tensors such a job uses.
    """
    if backend is None:
        return "cpu:gloo,cuda:gloo" if has_cuda else "gloo"
    text = str(backend).lower().strip()
    if ":" not in text:
        if text == "nccl":
            return "cuda:gloo" if has_cuda else "gloo"
        return text
    pairs = []
    for item in text.split(","):
        device, _, name = item.partition(":")
        name = name.strip()
        pairs.append(f"{device.strip()}:{'gloo' if name == 'nccl' else name}")
    return ",".join(pairs)


def _record_collective(
    module: ModuleType, name: str, position: int | None, ledger: ledger_file.LedgerWriter
) -> None:
    real = getattr(module, name, None)
    if real is None:
        return
    parameters = call_ledger.parameters(real)

    def argument(args: tuple[Any, ...], kwargs: dict[str, Any], index: int | None) -> Any:
        """The call's value for the parameter at `index`, given by position or by name."""
        if index is None or index >= len(parameters):
            return None
        if parameters[index] in kwargs:
            return kwargs[parameters[index]]
        return args[index] if index < len(args) else None

    group_at = parameters.index("group") if "group" in parameters else None
    op_at = parameters.index("op") if "op" in parameters else None

    @wraps(real)
    def collective(*args: Any, **kwargs: Any) -> Any:
        try:
            group = argument(args, kwargs, group_at)
            if group is None or group is module.GroupMember.WORLD:
                what = describe(argument(args, kwargs, position)) if position is not None else ""
                op = argument(args, kwargs, op_at)
                ledger.write(name, f"{what} {op}".strip() if op is not None else what)
        except Exception:
            pass  # the record is a diagnostic; the collective must run regardless
        return real(*args, **kwargs)

    _replace(module, name, collective)


def _replace(module: ModuleType, name: str, function: Callable[..., Any]) -> None:
    """Set it in the module, and in torch.distributed if that already re-exported it."""
    setattr(module, name, function)
    package = sys.modules.get("torch.distributed")
    if package is not None and hasattr(package, name):
        setattr(package, name, function)


def _bind(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    import inspect

    return inspect.signature(function).bind(*args, **kwargs)


def _stretch(timeout: Any, factor: float) -> Any:
    return timeout * factor if timeout is not None else None


def _write_record(path: str | None, record: dict[str, Any]) -> None:
    if not path:
        return
    from safelaunch.rundir import comm_file

    with suppress(OSError):  # the record is a diagnostic: the job runs on
        comm_file.write(path, record)


# What this rank asked for and got; "ddp": whether it built a DistributedDataParallel
# (torch 2.13 segfaults building one under TORCH_DISTRIBUTED_DEBUG=DETAIL).
_record: dict[str, Any] = {
    "requested": None,
    "used": None,
    "swapped": False,
    "groups": [],
    "ddp": False,
    "addresses": [],  # [host, port] of the rank's TCP sockets (rank/sockets.py)
}


def _group_created(group: Any, comm_file: str | None) -> None:
    """A group exists: its membership into the call ledger, its sockets into the record."""
    call_ledger.group_created(group)
    with suppress(Exception):
        from safelaunch.rank.sockets import tcp_addresses

        known = {tuple(a) for a in _record["addresses"]}
        found = [list(a) for a in tcp_addresses() if a not in known]
        if found:
            _record["addresses"] = sorted(_record["addresses"] + found)
            _write_record(comm_file, _record)


def patch_ddp(module: ModuleType) -> None:
    """Note in the record when the rank builds a DistributedDataParallel."""
    cls = module.DistributedDataParallel
    real_init = cls.__init__
    comm_file = os.environ.get(names.COMM_FILE)

    @wraps(real_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if not _record["ddp"]:
            _record["ddp"] = True
            _write_record(comm_file, _record)
        real_init(self, *args, **kwargs)

    cls.__init__ = __init__


def patch(module: ModuleType) -> None:
    """Wrap init_process_group and new_group (and, for a rerun, the collectives)."""
    force = os.environ.get(names.FORCE_GLOO) == "1"
    factor = float(os.environ.get(names.TIMEOUT_FACTOR, "4"))
    comm_file = os.environ.get(names.COMM_FILE)
    record = _record
    torch = sys.modules["torch"]

    def swapped(backend: object) -> str:
        return gloo_backend(backend, bool(torch.cuda.is_available()))

    real_init = module.init_process_group

    @wraps(real_init)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        bound = _bind(real_init, args, kwargs)
        backend = bound.arguments.get("backend")
        record["requested"] = None if backend is None else str(backend)
        if force:
            bound.arguments["backend"] = swapped(backend)
            bound.arguments.pop("pg_options", None)
            if "timeout" in bound.arguments:
                bound.arguments["timeout"] = _stretch(bound.arguments["timeout"], factor)
            record["used"] = bound.arguments["backend"]
            record["swapped"] = record["used"] != record["requested"]
        _write_record(comm_file, record)  # before the call: init itself may be what fails
        result = real_init(*bound.args, **bound.kwargs)
        rejoined()  # after a destroy_process_group: it takes part again
        group_started()
        with suppress(Exception):
            record["used"] = str(module.get_backend_config())
        _write_record(comm_file, record)
        with suppress(Exception):
            _group_created(module._world.default_pg, comm_file)
        return result

    real_new_group = module.new_group

    @wraps(real_new_group)
    def new_group(*args: Any, **kwargs: Any) -> Any:
        if force:
            bound = _bind(real_new_group, args, kwargs)
            backend = bound.arguments.get("backend")
            if backend is not None:
                bound.arguments["backend"] = swapped(backend)
                bound.arguments.pop("pg_options", None)
                record["groups"].append([str(backend), bound.arguments["backend"]])
                _write_record(comm_file, record)
            if bound.arguments.get("timeout") is not None:
                bound.arguments["timeout"] = _stretch(bound.arguments["timeout"], factor)
            group = real_new_group(*bound.args, **bound.kwargs)
        else:
            group = real_new_group(*args, **kwargs)
        _group_created(group, comm_file)
        return group

    _replace(module, "init_process_group", init_process_group)
    _replace(module, "new_group", new_group)
    flight_recorder.track_p2p(module, _replace)
    calls_path = os.environ.get(names.CALLS_FILE)
    if calls_path:
        call_ledger.install(module, calls_path, _replace)
    _replace(module, "destroy_process_group", _leaving(module, module.destroy_process_group))
    ledger_path = os.environ.get(names.COLLECTIVES_FILE)
    if force and ledger_path:
        from safelaunch.rundir import ledger_file

        try:
            ledger = ledger_file.LedgerWriter(ledger_path)
        except OSError:
            return
        for name, position in COLLECTIVES.items():
            _record_collective(module, name, position, ledger)


def _leaving(module: ModuleType, real: Callable[..., Any]) -> Callable[..., Any]:
    """destroy_process_group, noting first when it ends the default group's collectives:
    a rank that does so while its peers still communicate left early (diagnose/leaving.py)."""

    @wraps(real)
    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        with suppress(Exception):  # a diagnostic: the destroy runs regardless
            group = args[0] if args else kwargs.get("group")
            if group is None or group is module.GroupMember.WORLD:
                left_collectives(sys._getframe(1))
        return real(*args, **kwargs)

    return destroy_process_group


class _PatchOnLoad:
    """A meta-path finder that patches its modules right after they execute, then steps aside."""

    def __init__(self, patches: dict[str, Callable[[ModuleType], None]]) -> None:
        self._patches = patches

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        patcher = self._patches.pop(fullname, None)
        if patcher is None:
            return None
        sys.meta_path.remove(self)  # find the real spec without us
        from importlib.util import find_spec

        try:
            spec = find_spec(fullname)
        finally:
            if self._patches:
                sys.meta_path.insert(0, self)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        real_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            real_exec(module)
            try:
                patcher(module)
            except Exception as exc:  # the job runs unpatched rather than not at all
                print(f"safelaunch: could not patch {fullname}: {exc!r}", file=sys.stderr)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Patch torch.distributed (and DDP) when (if ever) the script loads them."""
    if not (os.environ.get(names.COMM_FILE) or os.environ.get(names.FORCE_GLOO)):
        return
    patches: dict[str, Callable[[ModuleType], None]] = {}
    for name, patcher in (
        (TARGET, patch),
        (DDP_MODULE, patch_ddp),
        (OPTIMIZER_MODULE, count_optimizer_steps),  # the step `safelaunch status` infers
    ):
        if name in sys.modules:  # imported by a sitecustomize before us: patch in place
            patcher(sys.modules[name])
        else:
            patches[name] = patcher
    if patches:
        sys.meta_path.insert(0, _PatchOnLoad(patches))
