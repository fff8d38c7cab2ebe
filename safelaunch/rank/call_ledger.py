"""Inside a rank: the ledger of its torch.distributed calls, in every run, for every group.

Each collective (op, group, dtype[shape], the rank's count in that group) and each
point-to-point call (peer as a global rank, group, tag, dtype[shape]) is written before
it runs, with the user's file:line; its completion (a blocking call returning, a wait()
on an async one) is written after. What a rank never completed is where it waits; the
diagnosis compares the ranks' ledgers per group (rundir/calls_file.py has the format).

Called from dist_hooks.patch as torch.distributed loads: torch has loaded what the
record module needs by then, so an empty rank never pays for it.
"""

from __future__ import annotations

import os
import sys

from safelaunch.rank.stdlib_standins import Lock, get_ident, suppress, wraps

TYPE_CHECKING = False  # `typing` costs every rank ~2 ms at start; only the checker needs it
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType, ModuleType
    from typing import Any

    from safelaunch.rundir.calls_file import CallsWriter

# The argument that describes each collective (its input), by position.
COLLECTIVES: dict[str, int | None] = {
    "all_reduce": 0,
    "broadcast": 0,
    "reduce": 0,
    "all_gather": 1,
    "all_gather_into_tensor": 1,
    "reduce_scatter": 1,
    "reduce_scatter_tensor": 1,
    "all_to_all": 1,
    "all_to_all_single": 1,
    "gather": 0,
    "scatter": 0,
    "barrier": None,
}
P2P = {"send": "dst", "recv": "src", "isend": "dst", "irecv": "src"}
WORKS_KEPT = 256  # async calls remembered until seen completed (a work holds its tensors)


def describe(value: object) -> str:
    """`float32[4, 5]` for a tensor, `list of 2 x float32[4]` for a list of them."""
    if isinstance(value, (list, tuple)):
        inner = describe(value[0]) if value else "nothing"
        return f"list of {len(value)} x {inner}"
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return type(value).__name__
    return f"{str(dtype).removeprefix('torch.')}[{', '.join(str(n) for n in shape)}]"


def parameters(function: Callable[..., Any]) -> list[str]:
    import inspect

    try:
        return list(inspect.signature(function).parameters)
    except (ValueError, TypeError):
        return []


def argument(
    names: list[str], args: tuple[Any, ...], kwargs: dict[str, Any], name: str | int | None
) -> Any:
    """The call's value for a parameter (by name or position), given by position or name."""
    if name is None:
        return None
    index = name if isinstance(name, int) else (names.index(name) if name in names else None)
    if index is None or index >= len(names):
        return None
    if names[index] in kwargs:
        return kwargs[names[index]]
    return args[index] if index < len(args) else None


class Ledger:
    """The rank's state: call numbers, per-group counts, async works not yet completed."""

    def __init__(self, module: ModuleType, writer: CallsWriter) -> None:
        self.module = module
        self.writer = writer
        self.counts: dict[str, int] = {}
        # id(work) -> (the calls it completes, the work: kept alive so the id stays its own)
        self.works: dict[int, tuple[tuple[int, ...], Any]] = {}
        self.inside: set[int] = set()  # threads inside a recorded call
        self._n = 0
        self._lock = Lock()
        self._skipped = _skipped_prefixes(module)
        self._backends: dict[int, Any] = {}  # id(group) -> its backend (None: no count)
        self.p2p_ops: dict[str, int] = {}  # group name -> its p2p ops so far (torch counts them)

    def sequence(self, group: Any) -> int | None:
        """torch's count of the ops the group issued so far: collectives from C++ (DDP's
        reducer) and p2p calls included, which the ledger's own count is not (the
        diagnosis puts the ones not written back in: diagnose/unseen_calls.py)."""
        key = id(group)
        backend = self._backends.get(key, False)
        if backend is False:
            backend = self._backends[key] = _backend(self.module, group)
        if backend is None:
            return None
        try:
            return int(backend._get_sequence_number_for_group())
        except Exception:
            self._backends[key] = None
            return None

    def number(self) -> int:
        if self.works:
            self.poll()
        with self._lock:
            self._n += 1
            return self._n

    def count(self, group: str) -> int:
        with self._lock:
            self.counts[group] = count = self.counts.get(group, 0) + 1
            return count

    def group_name(self, group: Any) -> str:
        world = self.module._world
        found = world.pg_names.get(group if group is not None else world.default_pg)
        return "?" if found is None else str(found)

    def where(self) -> str:
        """The innermost frame outside torch and safelaunch: the user's file:line."""
        frame: FrameType | None = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.startswith(self._skipped):
            frame = frame.f_back
        return "" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"

    def remember(self, work: Any, numbers: tuple[int, ...]) -> None:
        if work is None:
            return
        with self._lock:
            self.works[id(work)] = (numbers, work)
            if len(self.works) > WORKS_KEPT:  # never completed: forget the oldest
                del self.works[next(iter(self.works))]

    def poll(self) -> None:
        """Write the completion of the async calls whose work has completed.

        Polled (before each call is written, and when the launcher asks for the flight
        record) rather than by wrapping Work.wait: a Python frame there would be the
        innermost frame of every rank waiting in a collective, which the stacks' reading
        takes for what the rank is doing.
        """
        with self._lock:
            finished = [key for key, (_, work) in self.works.items() if completed(work)]
            numbers = [n for key in finished for n in self.works.pop(key)[0]]
        for n in numbers:
            self.writer.done(n)

    def group_created(self, group: Any) -> None:
        """Write a group's membership (global ranks), if this rank is a member."""
        with suppress(Exception):
            world = self.module._world
            ranks = world.pg_group_ranks.get(group)
            # torch 2.13 keeps ranks for some groups a rank is not in (new_subgroups'
            # others, measured): not its group, and it has no name there
            if ranks is None or self.module.get_rank() not in ranks:
                return
            desc = str(getattr(group, "group_desc", ""))
            self.writer.group(self.group_name(group), sorted(ranks), desc)


def _backend(module: ModuleType, group: Any) -> Any:
    """The group's backend that counts its ops (CPU's, else CUDA's); None: none does."""
    torch = sys.modules.get("torch")
    try:
        pg = group if group is not None else module._get_default_group()
    except Exception:
        return None
    for device in ("cpu", "cuda"):
        try:
            backend = pg._get_backend(torch.device(device))  # type: ignore[union-attr]
            backend._get_sequence_number_for_group()
            return backend
        except Exception:
            continue
    return None


def completed(work: Any) -> bool:
    """The work completed, and not with an error: Gloo's work that timed out or lost its
    peer is_completed() too (measured, torch 2.13), yet the rank raised in its wait():
    that call is where it stopped, as a blocking call that raised has no `D` either."""
    try:
        return bool(work.is_completed()) and work.exception() is None
    except Exception:
        return True  # an unusable work: nothing will complete it


def _skipped_prefixes(module: ModuleType) -> tuple[str, ...]:
    torch_dir = os.path.dirname(os.path.dirname(module.__file__ or ""))  # .../torch
    ours = os.path.dirname(os.path.dirname(__file__))
    return (torch_dir + os.sep, ours + os.sep)


def _recorded(
    ledger: Ledger,
    real: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    write: Callable[[], tuple[int, ...]],
    blocking: bool,
) -> Any:
    """Run the real call, written first by `write` unless the thread is inside another
    recorded call (torch's recv calls irecv, batch_isend_irecv each isend)."""
    me = get_ident()
    if me in ledger.inside:
        return real(*args, **kwargs)
    # try/except, not suppress(): ~1 us a call less (bench/ledger_cost.py)
    try:
        numbers = write()
    except Exception:  # the record is a diagnostic; the call runs regardless
        numbers = ()
    ledger.inside.add(me)
    try:
        result = real(*args, **kwargs)
    finally:
        ledger.inside.discard(me)
    try:
        if blocking:
            for n in numbers:
                ledger.writer.done(n)
        else:
            _remember(ledger, result, numbers)
    except Exception:
        pass
    return result


def _remember(ledger: Ledger, result: Any, numbers: tuple[int, ...]) -> None:
    if isinstance(result, list) and len(result) == len(numbers):  # a work per op: Gloo
        for n, work in zip(numbers, result, strict=True):
            ledger.remember(work, (n,))
    elif isinstance(result, list):  # one coalesced work that stands for them all: NCCL
        ledger.remember(result[0] if result else None, numbers)
    else:
        ledger.remember(result, numbers)


def _collective(ledger: Ledger, name: str, position: int | None) -> Callable[..., Any] | None:
    real = getattr(ledger.module, name, None)
    if real is None:
        return None
    names = parameters(real)

    @wraps(real)
    def collective(*args: Any, **kwargs: Any) -> Any:
        blocking = not argument(names, args, kwargs, "async_op")

        def write() -> tuple[int, ...]:
            pg = argument(names, args, kwargs, "group")
            group = ledger.group_name(pg)
            what = describe(argument(names, args, kwargs, position)) if position is not None else ""
            op = argument(names, args, kwargs, "op")
            if op is not None:
                what = f"{what} {str(op).removeprefix('RedOpType.')}".strip()
            n = ledger.number()
            count = ledger.count(group)
            seq = ledger.sequence(pg)
            ledger.writer.collective(n, blocking, group, count, name, what, ledger.where(), seq)
            return (n,)

        return _recorded(ledger, real, args, kwargs, write, blocking)

    return collective


def _peer(ledger: Ledger, group: Any, peer: Any, group_peer: Any) -> int | None:
    if peer is None and group_peer is not None:  # a group rank: the ledger says global ranks
        module = ledger.module
        return int(module.get_global_rank(group or module._get_default_group(), group_peer))
    return None if peer is None else int(peer)


def _p2p(ledger: Ledger, op: str, peer_name: str) -> Callable[..., Any]:
    real = getattr(ledger.module, op)
    names = parameters(real)
    blocking = not op.startswith("i")

    @wraps(real)
    def call(*args: Any, **kwargs: Any) -> Any:
        def write() -> tuple[int, ...]:
            group = argument(names, args, kwargs, "group")
            peer = argument(names, args, kwargs, peer_name)
            peer = _peer(ledger, group, peer, argument(names, args, kwargs, f"group_{peer_name}"))
            tag = int(argument(names, args, kwargs, "tag") or 0)
            n = ledger.number()
            what = describe(argument(names, args, kwargs, 0))
            name = ledger.group_name(group)
            seq = ledger.sequence(group)
            ledger.p2p_ops[name] = ledger.p2p_ops.get(name, 0) + 1
            ledger.writer.p2p(n, blocking, name, op, peer, tag, what, ledger.where(), seq)
            return (n,)

        return _recorded(ledger, real, args, kwargs, write, blocking)

    return call


def _batch(ledger: Ledger) -> Callable[..., Any]:
    real = ledger.module.batch_isend_irecv

    @wraps(real)
    def batch_isend_irecv(p2p_op_list: Any) -> Any:
        def write() -> tuple[int, ...]:
            numbers = []
            issued: dict[str, int] = {}  # ops of each group in this batch so far
            for p in p2p_op_list:  # P2POp.peer is a global rank already
                op = getattr(p.op, "__name__", str(p.op))
                n = ledger.number()
                group = ledger.group_name(p.group)
                what, where = describe(p.tensor), ledger.where()
                seq = ledger.sequence(p.group)  # torch counts each op of the batch
                seq = None if seq is None else seq + issued.get(group, 0)
                issued[group] = issued.get(group, 0) + 1
                ledger.p2p_ops[group] = ledger.p2p_ops.get(group, 0) + 1
                ledger.writer.p2p(n, False, group, op, p.peer, int(p.tag), what, where, seq)
                numbers.append(n)
            return tuple(numbers)

        return _recorded(ledger, real, (p2p_op_list,), {}, write, blocking=False)

    return batch_isend_irecv


_active: Ledger | None = None


def install(
    module: ModuleType, path: str, replace: Callable[[ModuleType, str, Any], None]
) -> Ledger | None:
    """Wrap distributed_c10d's collectives and p2p calls (as it loads) to write the ledger."""
    global _active
    from safelaunch.rundir.calls_file import CallsWriter

    try:
        writer = CallsWriter(path)
    except OSError:
        return None  # a diagnostic: the job runs without it
    ledger = Ledger(module, writer)
    for name, position in COLLECTIVES.items():
        wrapped = _collective(ledger, name, position)
        if wrapped is not None:
            replace(module, name, wrapped)
    for op, peer_name in P2P.items():
        replace(module, op, _p2p(ledger, op, peer_name))
    replace(module, "batch_isend_irecv", _batch(ledger))
    _active = ledger
    return ledger


def p2p_ops_of_default_group() -> int:
    """The p2p ops the rank issued on its default group (the heartbeat takes them out of
    torch's count, which holds them: its collective count is then the same on every rank,
    whatever each one sends)."""
    ledger = _active
    if ledger is None:
        return 0
    try:
        return ledger.p2p_ops.get(ledger.group_name(None), 0)
    except Exception:
        return 0


def poll() -> None:
    """Write what completed of the async calls (the flight record's dump calls this)."""
    if _active is not None:
        with suppress(Exception):
            _active.poll()


def group_created(group: Any) -> None:
    """After init_process_group / new_group returned: its membership, if the rank is in it."""
    if _active is not None:
        _active.group_created(group)
