"""Inside a rank: write torch's flight recorder (and the p2p calls in flight) on demand.

torch 2.13 records every collective per process group for Gloo too (on by default,
TORCH_FR_BUFFER_SIZE entries), but Gloo never writes the record to disk. The launcher's
dump signal already makes faulthandler print every thread; faulthandler chains to the
Python-level handler installed here, whose C part writes the signal number to the
wakeup fd at once (even while the main thread waits in a collective), and a daemon
thread blocked on that pipe writes the record. The dump itself is
`_dump_fr_trace_json` (~0.1 ms measured; the pickle variant took seconds here).

Two things the Gloo record lacks are added from the rank's own view:
- pg_config: Gloo dumps it empty (keyed ''), so torch's analyser cannot tell a group's
  members; they come from torch.distributed's own group table.
- point-to-point calls: Gloo records no send/recv at all (measured), so the blocking
  ones, and async ones whose work has not completed, are tracked here.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import sys
import time

from safelaunch.rank import beat, names
from safelaunch.rank.call_ledger import completed
from safelaunch.rank.stdlib_standins import Lock, signals, start_thread, suppress, wraps

TYPE_CHECKING = False  # `typing` costs every rank ~2 ms at start; only the checker needs it
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType, ModuleType
    from typing import Any

P2P_KEPT = 16  # async p2p works remembered until they complete (they hold their tensors)

_directory: str | None = None
_lock = Lock()  # one dump at a time (the signal and an exiting main thread)
_lock_p2p = Lock()
_p2p_blocking: dict[int, dict[str, Any]] = {}  # id -> call, while a blocking send/recv runs
_p2p_async: list[tuple[dict[str, Any], Any]] = []  # (call, work) not yet seen completed
_p2p_count = 0


def armed() -> bool:
    """True when the dump signal also writes the flight record (chain faulthandler to it)."""
    return _directory is not None


def arm() -> None:
    """Install the trigger; call from the main thread BEFORE faulthandler registers the signal."""
    global _directory
    signum = os.environ.get(names.DUMP_SIGNAL)
    directory = os.environ.get(names.FLIGHT_DIR)
    if signum:  # registered first of all exit handlers: it runs last
        atexit.register(_stop_answering, int(signum))
    if not signum or not directory:
        return
    try:
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        signals.signal(int(signum), _ignore)
        signals.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except (OSError, ValueError):
        return  # without it the stacks still come; only the record is missing
    _directory = directory
    start_thread(_wait_for_signal, read_end, int(signum))


def _stop_answering(signum: int) -> None:
    """After the last exit handler: the dump signal is ignored until the process is gone.

    CPython's finalisation resets a signal with a Python handler to SIG_DFL, then
    faulthandler puts back the handler it chained to, the signal module's, while torch's
    modules are still being torn down (~0.5 s after torch). The launcher's dump request
    arriving then killed a rank that was exiting on its own (signal 38 for the whole
    teardown, a crash past its end: SIGABRT, SIGSEGV; measured with torch 2.13).
    """
    with suppress(Exception):
        faulthandler.unregister(signum)
        signals.signal(signum, signals.SIG_IGN)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """The Python half of the dump signal: nothing (its C half woke the dump thread)."""


def _wait_for_signal(read_end: int, signum: int) -> None:
    while True:
        try:
            data = os.read(read_end, 64)
        except OSError:
            return
        if not data:
            return
        if signum in data:  # the wakeup fd carries every signal with a Python handler
            dump("signal")


def dump(reason: str) -> None:
    """Write this rank's flight record to the flight directory; never raises."""
    if _directory is None:
        return
    ledger = sys.modules.get("safelaunch.rank.call_ledger")
    if ledger is not None:  # the call ledger says which async calls have completed by now
        ledger.poll()
    with suppress(Exception), _lock:
        found = _record(reason)
        if found is not None:
            from safelaunch.rundir import flight_file  # here: most ranks never dump

            rank, data = found
            flight_file.write(_directory, rank, data)


def _record(reason: str) -> tuple[int, bytes] | None:
    """torch's record plus what Gloo leaves out; None when torch.distributed never started.

    torch's JSON is written as it comes, with one key added at its end: parsing and
    re-serialising 2000 entries would cost the rank ~10x more (bench/stragglers.py).
    """
    import json  # here: torch has loaded it; at the rank's start it would cost `re`

    dist = sys.modules.get("torch.distributed")
    torch = sys.modules.get("torch")
    if dist is None or torch is None or not dist.is_available() or not dist.is_initialized():
        return None
    raw = bytes(torch._C._distributed_c10d._dump_fr_trace_json(True, False)).rstrip()
    if not raw.endswith(b"}"):
        return None
    beater = beat._active
    ours = {
        "reason": reason,
        "time": time.time(),
        "rank": dist.get_rank(),
        "pg_config": _groups(dist),  # Gloo's own is empty
        "p2p": _p2p_pending(),
        "phases": beater.phases.snapshot() if beater is not None else None,
    }
    extra = b'"safelaunch": ' + json.dumps(ours).encode()
    return ours["rank"], raw[:-1] + (b", " if raw[:-1].strip() != b"{" else b"") + extra + b"}"


def _groups(dist: Any) -> dict[str, dict[str, str]]:
    """{group name: {name, desc, ranks}} for every group this rank belongs to (torch's format)."""
    world = dist.distributed_c10d._world
    groups = {}
    for group, name in list(world.pg_names.items()):
        ranks = sorted(world.pg_group_ranks.get(group, {}))
        desc = str(getattr(group, "group_desc", "undefined"))
        groups[str(name)] = {"name": str(name), "desc": desc, "ranks": str(ranks)}
    return groups


def _p2p_pending() -> list[dict[str, Any]]:
    with _lock_p2p:
        pending = list(_p2p_blocking.values())
        for call, work in _p2p_async:
            with suppress(Exception):
                if not completed(work):
                    pending.append(call)
    return pending


def _describe(tensor: Any) -> tuple[list[int], str]:
    shape = [int(n) for n in getattr(tensor, "shape", ())]
    return shape, str(getattr(tensor, "dtype", "?")).removeprefix("torch.")


def _call(module: ModuleType, op: str, tensor: Any, peer: Any, group: Any) -> dict[str, Any]:
    global _p2p_count
    _p2p_count += 1
    shape, dtype = _describe(tensor)
    name = None
    with suppress(Exception):
        name = module._world.pg_names.get(group or module.GroupMember.WORLD)
    return {
        "op": op,
        "peer": None if peer is None else int(peer),  # a global rank, as torch's API takes it
        "shape": shape,
        "dtype": dtype,
        "group": name,
        "n": _p2p_count,
        "since": time.time(),
    }


def _peer_and_group(
    module: ModuleType, args: tuple[Any, ...], kwargs: dict[str, Any], peer_name: str
) -> tuple[Any, Any]:
    """The peer as a global rank (given as dst/src, or as group_dst/group_src: a group rank)."""
    peer = kwargs.get(peer_name, args[1] if len(args) > 1 else None)
    group = kwargs.get("group", args[2] if len(args) > 2 else None)
    group_peer = kwargs.get(f"group_{peer_name}")
    if peer is None and group_peer is not None:  # batch_isend_irecv passes group ranks
        peer = module.get_global_rank(group or module._get_default_group(), group_peer)
    return peer, group


def _blocking(module: ModuleType, op: str, peer_name: str) -> Callable[..., Any]:
    real = getattr(module, op)

    @wraps(real)
    def call(*args: Any, **kwargs: Any) -> Any:
        key = None
        with suppress(Exception):
            peer, group = _peer_and_group(module, args, kwargs, peer_name)
            entry = _call(module, op, args[0] if args else kwargs.get("tensor"), peer, group)
            key = entry["n"]
            with _lock_p2p:
                _p2p_blocking[key] = entry
        result = real(*args, **kwargs)  # one that raised stays pending: the rank stopped there
        if key is not None:
            with _lock_p2p:
                _p2p_blocking.pop(key, None)
        return result

    return call


def _remember(entries: list[dict[str, Any]], works: list[Any]) -> None:
    with _lock_p2p:
        _p2p_async[:] = [(c, w) for c, w in _p2p_async if not completed(w)] + list(
            zip(entries, works, strict=False)
        )
        del _p2p_async[:-P2P_KEPT]


def _asynchronous(module: ModuleType, op: str, peer_name: str) -> Callable[..., Any]:
    real = getattr(module, op)

    @wraps(real)
    def call(*args: Any, **kwargs: Any) -> Any:
        work = real(*args, **kwargs)
        with suppress(Exception):
            peer, group = _peer_and_group(module, args, kwargs, peer_name)
            tensor = args[0] if args else kwargs.get("tensor")
            if work is not None:
                _remember([_call(module, op.lstrip("i"), tensor, peer, group)], [work])
        return work

    return call


def _batch(module: ModuleType) -> Callable[..., Any]:
    real = module.batch_isend_irecv

    @wraps(real)
    def batch_isend_irecv(p2p_op_list: Any) -> Any:
        works = real(p2p_op_list)
        with suppress(Exception):
            entries = [
                _call(module, p.op.__name__.lstrip("i"), p.tensor, p.peer, p.group)
                for p in p2p_op_list
            ]
            # One work per op (Gloo): the wrapped isend/irecv inside recorded them already.
            # A single coalesced work (NCCL) stands for every op of the batch.
            if works and len(works) != len(entries):
                _remember(entries, [works[0]] * len(entries))
        return works

    return batch_isend_irecv


def _destroy(module: ModuleType) -> Callable[..., Any]:
    real = module.destroy_process_group

    @wraps(real)
    def destroy_process_group(group: Any = None) -> Any:
        if group is None:  # the end of the job's collectives: its group table still exists
            dump("exit")
        return real(group)

    return destroy_process_group


def track_p2p(module: ModuleType, replace: Callable[[ModuleType, str, Any], None]) -> None:
    """Wrap torch.distributed's p2p calls (distributed_c10d, as it loads) to know who waits,
    and destroy_process_group to write the record of a job that ends well (its arrival
    times show a straggler). Not at exit: torch may be half torn down by then."""
    if _directory is None:
        return
    replace(module, "destroy_process_group", _destroy(module))
    for op, peer_name in (("send", "dst"), ("recv", "src")):
        replace(module, op, _blocking(module, op, peer_name))
    for op, peer_name in (("isend", "dst"), ("irecv", "src")):
        replace(module, op, _asynchronous(module, op, peer_name))
    replace(module, "batch_isend_irecv", _batch(module))
