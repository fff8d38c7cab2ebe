"""The one launcher module that imports torch: torch's rendezvous handlers and TCPStore.

Imported only for --nnodes > 1 (torchrun imports torch for every launch). The
handlers are torch's own: c10d (DynamicRendezvousHandler: join, node ranks, keep-alive,
a shared TCPStore for the workers) and static (a TCPStore on node 0 at
MASTER_ADDR:MASTER_PORT that every node's launcher and worker connects to).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from safelaunch import defaults
from safelaunch.config import LaunchConfig, RdzvBackend
from safelaunch.errors import RendezvousError
from safelaunch.interpreter import paused
from safelaunch.rendezvous.keyvalue import Joined

STATIC_DEFAULT_PORT = 29500  # torchrun's --master-port default
# A directory: at the end, each launcher writes there what it asked of the job's store
# (bench/scale.py reads it). Counting costs two integer additions per operation.
COUNTS_ENV = "SAFELAUNCH_STORE_COUNTS"
_T = TypeVar("_T")


class TextStore:
    """torch's store with str values and one lock (the liveness thread shares it).

    Counts each operation and the bytes of keys and values it moves, per operation.
    """

    def __init__(self, store: Any, counts: dict[str, list[int]] | None = None) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._joined = time.time()
        self.counts: dict[str, list[int]] = counts or {
            op: [0, 0] for op in ("set", "get", "add", "check", "multi_get", "wait")
        }

    def clone(self) -> TextStore:
        """The same store over a connection of its own, counted with this one's.

        For the liveness beat: on the shared connection it waited behind the main thread's
        reads (16 launchers on 2 cores: 3.1 s for node 0's own beat, behind its reading of
        15 snapshots), and the other nodes took node 0 for lost."""
        return TextStore(self._store.clone(), self.counts)

    def _count(self, op: str, size: int) -> None:
        entry = self.counts[op]  # a clone's thread too: one op more or less in a bench count
        entry[0] += 1
        entry[1] += size

    def set(self, key: str, value: str) -> None:
        with self._lock:
            self._count("set", len(key) + len(value))
            self._store.set(key, value)

    def get(self, key: str) -> bytes:
        with self._lock:
            value = bytes(self._store.get(key))
            self._count("get", len(key) + len(value))
            return value

    def add(self, key: str, amount: int) -> int:
        with self._lock:
            self._count("add", len(key) + 8)
            return int(self._store.add(key, amount))

    def check(self, keys: list[str]) -> bool:
        with self._lock:
            self._count("check", sum(len(key) for key in keys))
            return bool(self._store.check(keys))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        with self._lock:
            values = [bytes(v) for v in self._store.multi_get(keys)]
            self._count("multi_get", sum(map(len, keys)) + sum(map(len, values)))
            return values

    def wait(self, keys: list[str], seconds: float) -> bool:
        """Until every key exists, at most `seconds`: the store wakes the caller (no polling)."""
        from datetime import timedelta

        from torch.distributed import DistStoreError

        with self._lock:
            self._count("wait", sum(len(key) for key in keys))
            try:
                self._store.wait(keys, timedelta(seconds=seconds))
            except DistStoreError:  # its timeout; a lost connection is another error
                return False
            return True

    def write_counts(self, node: int, phase: str = "") -> None:
        """What this launcher asked of the store so far, into $SAFELAUNCH_STORE_COUNTS (if
        set): at the end, and before each attempt's spawn (`phase`: bench/scale.py --what
        start). `joined`: the wall clock when torch's rendezvous returned."""
        where = os.environ.get(COUNTS_ENV)
        if not where:
            return
        with self._lock:
            ops = {op: list(entry) for op, entry in self.counts.items()}
        seconds = time.monotonic() - self._started
        record = {"node": node, "seconds": seconds, "joined": self._joined, "ops": ops}
        name = f"store-{node}{'-' + phase if phase else ''}.json"
        with open(os.path.join(where, name), "w") as out:
            json.dump(record, out)


def _parameters(config: LaunchConfig) -> Any:
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    low, high = config.nnodes
    conf: dict[str, object] = dict(config.rdzv_conf)
    run_id = config.rdzv_id or "none"
    if config.rdzv_backend == RdzvBackend.STATIC:
        port = config.master_port or STATIC_DEFAULT_PORT
        endpoint = f"{config.master_addr or '127.0.0.1'}:{port}"
        conf["rank"] = config.node_rank
        conf.setdefault("timeout", conf.get("join_timeout", str(defaults.JOIN_TIMEOUT_S)))
    else:
        endpoint = config.rdzv_endpoint
    return RendezvousParameters(
        backend=config.rdzv_backend,
        endpoint=endpoint,
        run_id=run_id,
        min_nodes=low,
        max_nodes=high,
        local_addr=config.local_addr,
        **conf,
    )


def quiet_torch_logs() -> None:
    """The launcher's own torch: no C++ warnings when a peer's store closes at the end.

    Set before torch loads; the ranks' environment was copied earlier and keeps the
    user's settings.
    """
    import logging

    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    logging.getLogger("torch.distributed.elastic").setLevel(logging.ERROR)


def serve_workers_store(addr: str) -> tuple[Any, int]:
    """A fresh TCPStore for one attempt's workers (they connect as clients): (store, port).

    Fresh per attempt: the workers' keys (Gloo's peer addresses) must not outlive it.
    """
    from datetime import timedelta

    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    store = TCPStore(
        addr,
        0,
        is_master=True,
        wait_for_workers=False,
        multi_tenant=True,
        timeout=timedelta(seconds=900),
    )
    return store, int(store.port)


def rendezvous(
    config: LaunchConfig, meanwhile: Callable[[], None] | None = None
) -> tuple[Joined, TextStore]:
    """Join through torch's handler; this node's place and safelaunch's view of the store.

    `meanwhile`: the launcher's own work, done while torch's rendezvous waits for the other
    nodes (on_fresh_thread)."""
    quiet_torch_logs()
    with paused(keep=True):  # torch stays loaded (interpreter.py)
        try:
            from torch.distributed import PrefixStore  # type: ignore[attr-defined]
            from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler
        except Exception as exc:  # torch missing or broken: multi-node cannot start
            raise RendezvousError(
                f"multi-node launch needs torch in the launcher's environment: {exc}",
                "install torch (pip install torch), or run safelaunch doctor",
            ) from None
        try:  # the c10d handler imports its backend and dynamic_rendezvous here
            handler = get_rendezvous_handler(_parameters(config))
        except Exception as exc:
            raise _failed(config, exc) from None
    return _round(config, handler, PrefixStore, meanwhile)


def on_fresh_thread(call: Callable[[], _T], meanwhile: Callable[[], None] | None = None) -> _T:
    """`call()` on a new thread while this one waits (signals still reach it here), running
    `meanwhile()` first if given.

    A node waits in torch's rendezvous for the others, and polls its state once a second:
    this thread's work done there (imports the launch needs only once the nodes met) is off
    the path to the spawn on an idle machine.

    torch's c10d handler records an event at each step of its rendezvous, naming the step
    with inspect.stack(), whose cost grows with the caller's stack: under `python -m
    safelaunch` each of runpy's two frozen frames is a scan of sys.modules, and one record
    took 195 ms (9.6 ms from a script, 6 ms on a fresh thread; 2 cores, load 22). With 16
    launchers on 2 cores their keep-alives then came later than keep_alive_max_attempt
    allows, torch dropped them as dead, and the rendezvous never completed.
    """
    result: list[_T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # handed to the waiting thread, raised there
            error.append(exc)

    thread = threading.Thread(target=run, name="safelaunch-rendezvous", daemon=True)
    thread.start()
    if meanwhile is not None:
        meanwhile()
    while thread.is_alive():
        thread.join(0.2)
    if error:
        raise error[0]
    return result[0]


def _failed(config: LaunchConfig, exc: Exception) -> RendezvousError:
    where = (
        config.rdzv_endpoint
        if config.rdzv_backend == RdzvBackend.C10D
        else f"{config.master_addr or '127.0.0.1'}:{config.master_port or STATIC_DEFAULT_PORT}"
    )
    return RendezvousError(
        f"rendezvous ({config.rdzv_backend} at {where}) failed: {type(exc).__name__}: "
        f"{str(exc).splitlines()[0] if str(exc) else ''}",
        "check that every node runs safelaunch with the same --nnodes and rendezvous flags "
        "and that the endpoint is reachable from all of them",
    )


def _round(
    config: LaunchConfig,
    handler: Any,
    prefix_store: Any,
    meanwhile: Callable[[], None] | None = None,
) -> tuple[Joined, TextStore]:
    """The next round of torch's rendezvous: the first, or an elastic re-rendezvous.

    Torch's c10d handler leaves the finished round and joins the next one with the nodes
    that remain and those that waited to join. Its store comes prefixed with the round
    (torch.rendezvous.<id>.<round>): no round reads the last one's liveness counters or
    votes, whichever node joined when.
    """
    try:
        info = on_fresh_thread(handler.next_rendezvous, meanwhile)
    except Exception as exc:
        raise _failed(config, exc) from None
    store_info = info.bootstrap_store_info
    if store_info is None:  # not from torch 2.13's c10d or static handlers
        raise RendezvousError("the rendezvous gave no store for the workers", "use c10d or static")
    addr, port = _round_master(config, info.rank, info.store, store_info)
    ours = prefix_store(f"safelaunch/{config.rdzv_id or 'none'}", info.store)
    joined = Joined(
        node=info.rank,
        nodes=info.world_size,
        master_addr=addr,
        master_port=port,
        shutdown=handler.shutdown,
        next_round=lambda: _round(config, handler, prefix_store),
        waiting=handler.num_nodes_waiting,
    )
    return joined, TextStore(ours)


def _round_master(config: LaunchConfig, rank: int, store: Any, store_info: Any) -> tuple[str, int]:
    """The round's master address and port, published by its node 0 for every node.

    torch 2.13's c10d handler writes them to the round's keys only when it builds them
    (a node's first round, or a new node 0): a node 0 that already was one keeps its
    old values and writes nothing, so a node joining a later round waits for
    MASTER_ADDR until read_timeout, and a node that was not node 0 keeps an old node 0's
    address. Here node 0 publishes them for every round, and every node reads them.
    """
    if config.rdzv_backend != RdzvBackend.C10D:
        return store_info.master_addr, int(store_info.master_port)
    from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo

    if rank == 0:
        store.set(RendezvousStoreInfo.MASTER_ADDR_KEY, store_info.master_addr)
        store.set(RendezvousStoreInfo.MASTER_PORT_KEY, str(store_info.master_port))
    addr = bytes(store.get(RendezvousStoreInfo.MASTER_ADDR_KEY)).decode()
    return addr, int(bytes(store.get(RendezvousStoreInfo.MASTER_PORT_KEY)).decode())
