"""A generator of exception faults: random exception types from random real layers.

    python tests/exception_faults.py OUT_DIR --seed S --count N

runs N generated faults inside this one process (torch imported once) and writes, per
fault, a rank log holding the REAL traceback (`traceback.format_exc()`: the real frames
of the real layers), the heartbeat record the rank would leave (its collective count
says the phase) and `faults.json` with each fault's kind and ground-truth class. The
classifier (tests/test_layer_faults.py, bench/exception_faults.py) reads them through
diagnose(), the launcher's own entry point for a failed attempt.

Each fault raises at a random depth of the user's own calls, with random words in what
the code controls (variable names, paths, messages), so no message table decides it.
The ground truth is what an ML engineer debugging it would call the class, written
beside each kind (KINDS) and never read back from the classifier.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import random
import socket
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

ENV, COMM, DATA, MODEL, RES, UNKNOWN = (
    "environment/launch",
    "communication",
    "data/sampling",
    "model/gradient",
    "resources",
    "unknown",
)
WORDS = [
    "alpha",
    "shard",
    "vortex",
    "quill",
    "ember",
    "lattice",
    "nimbus",
    "orbit",
    "pivot",
    "quasar",
    "rivet",
    "sable",
]
ERRORS = (ValueError, RuntimeError, KeyError, AssertionError, IndexError, TypeError, LookupError)

Fault = Callable[[random.Random], None]  # raises
_WORK: list[Path] = []  # where faults write their files: under the output directory


def _words(rng: random.Random, count: int = 3) -> str:
    return " ".join(rng.choice(WORDS) + str(rng.randrange(100)) for _ in range(count))


def _name(rng: random.Random) -> str:
    return "_".join(rng.choice(WORDS).upper() for _ in range(2)) + str(rng.randrange(1000))


def _nest(depth: int, call: Callable[[], object]) -> object:
    """The user's own calls between the script's top and the faulting line."""
    if depth <= 0:
        return call()
    return _nest(depth - 1, call)


def _user_raise(rng: random.Random) -> None:
    raise rng.choice(ERRORS)(_words(rng))


def _plain_raise(rng: random.Random) -> None:
    """A plain error outside any torch subsystem: from the user's code or a package's."""
    rng.choice([_user_raise, _package(("value", "runtime"))])(rng)


# --- the standard library ---------------------------------------------------------------
def _env_var(rng: random.Random) -> None:
    os.environ[_name(rng)]


def _missing_path(rng: random.Random) -> str:
    return f"/tmp/{_name(rng).lower()}/{rng.choice(WORDS)}.{rng.choice(['bin', 'csv', 'pt'])}"


def _open_missing(rng: random.Random) -> None:
    open(_missing_path(rng))  # noqa: SIM115


def _pathlib_missing(rng: random.Random) -> None:
    Path(_missing_path(rng)).read_bytes()


def _socket_refused(rng: random.Random) -> None:
    with socket.socket() as probe:  # a port nothing listens on: bound, then closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    socket.create_connection(("127.0.0.1", port), timeout=2)


def _subprocess_fails(rng: random.Random) -> None:
    subprocess.run(["false", _words(rng, 1)], check=True)


def _subprocess_missing(rng: random.Random) -> None:
    subprocess.run([f"{_name(rng).lower()}-tool"], check=True)


def _json_decode(rng: random.Random) -> None:
    json.loads('{"' + rng.choice(WORDS) + '": ' + rng.choice(["[1, 2", "tru", "{", "'x'"]))


def _pickle_cut(rng: random.Random) -> None:
    data = pickle.dumps({w: list(range(rng.randrange(3, 30))) for w in WORDS})
    pickle.loads(data[: rng.randrange(2, len(data) - 1)])


def _multiprocessing_context(rng: random.Random) -> None:
    import multiprocessing

    multiprocessing.get_context(rng.choice(WORDS))


def _disk_full(rng: random.Random) -> None:
    with open("/dev/full", "w") as out:
        out.write(_words(rng) * 1000)
        out.flush()


def _memory(rng: random.Random) -> None:
    bytearray(1 << rng.randrange(60, 63))


# --- torch ---------------------------------------------------------------------------
def _cuda(rng: random.Random) -> None:
    import torch

    calls = (
        lambda: torch.zeros(rng.randrange(1, 9)).cuda(),
        lambda: torch.cuda.set_device(rng.randrange(8)),
        lambda: torch.cuda.current_device(),
        lambda: torch.ones(3, device=f"cuda:{rng.randrange(4)}"),
    )
    rng.choice(calls)()


class _Dataset:
    def __init__(self, rng: random.Random, fault: Fault) -> None:
        self.rng, self.fault, self.bad = rng, fault, rng.randrange(4)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> object:
        if index == self.bad:
            _nest(self.rng.randrange(3), lambda: self.fault(self.rng))
        return index


def _loader(rng: random.Random, fault: Fault, workers: int) -> None:
    from torch.utils.data import DataLoader

    for _ in DataLoader(_Dataset(rng, fault), batch_size=2, num_workers=workers):
        pass


def _dataset_raises(rng: random.Random) -> None:
    inner = rng.choice([_user_raise, _open_missing, _json_decode, _env_var])
    _loader(rng, inner, 0)


def _worker_raises(rng: random.Random) -> None:
    _loader(rng, rng.choice([_user_raise, _open_missing, _json_decode]), 1)


def _collate_raises(rng: random.Random) -> None:
    from torch.utils.data import DataLoader

    def collate(batch: list[object]) -> object:
        return _nest(rng.randrange(3), lambda: _user_raise(rng))

    for _ in DataLoader(list(range(4)), batch_size=2, collate_fn=collate):
        pass


def _backward_twice(rng: random.Random) -> None:
    import torch

    w = torch.ones(rng.randrange(1, 5), requires_grad=True)
    loss = (w * w).sum()
    loss.backward()
    loss.backward()


def _leaf_in_place(rng: random.Random) -> None:
    import torch

    w = torch.ones(rng.randrange(1, 5), requires_grad=True)
    w.add_(1.0)


def _grad_hook_raises(rng: random.Random) -> None:
    import torch

    w = torch.ones(3, requires_grad=True)
    w.register_hook(lambda grad: _user_raise(rng))
    (w * 2).sum().backward()


def _function_backward_raises(rng: random.Random) -> None:
    import torch

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
            _user_raise(rng)
            return grad

    Scale.apply(torch.ones(2, requires_grad=True)).sum().backward()


def _optimizer_bad(rng: random.Random) -> None:
    import torch

    w = torch.nn.Parameter(torch.ones(2))
    calls = (
        lambda: torch.optim.SGD([], lr=0.1),
        lambda: torch.optim.SGD([w], lr=-rng.random()),
        lambda: torch.optim.Adam([w], betas=(1.0 + rng.random(), 0.9)),
        lambda: torch.optim.SGD([w * 2], lr=0.1),
        lambda: torch.optim.AdamW([w], weight_decay=-1.0 - rng.random()),
    )
    rng.choice(calls)()


def _optimizer_state(rng: random.Random) -> None:
    import torch

    w = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([w], lr=0.1)
    calls = (
        lambda: optimizer.load_state_dict(
            {"state": {}, "param_groups": [{"params": list(range(rng.randrange(2, 6)))}]}
        ),
        lambda: optimizer.add_param_group({"params": [w]}),
    )
    rng.choice(calls)()


def _load_corrupt(rng: random.Random) -> None:
    import torch

    work = Path(tempfile.mkdtemp(dir=_WORK[0] if _WORK else None))
    path, good = work / f"{rng.choice(WORDS)}.pt", work / "good.pt"
    torch.save({"w": torch.ones(rng.randrange(2, 50))}, good)
    data = good.read_bytes()
    choice = rng.randrange(3)
    path.write_bytes(data[: len(data) // 2] if choice == 0 else b"" if choice == 1 else b"v1\n")
    torch.load(path)


def _load_missing(rng: random.Random) -> None:
    import torch

    torch.load(_missing_path(rng))


def _nn_shape(rng: random.Random) -> None:
    import torch

    n = rng.randrange(2, 9)
    calls = (
        lambda: torch.nn.Linear(n, 4)(torch.zeros(2, n + 1)),
        lambda: torch.nn.Conv2d(3, 4, 3)(torch.zeros(1, n + 3, 8, 8)),
        lambda: torch.nn.Embedding(n, 3)(torch.tensor([n + 5])),
        lambda: torch.nn.LayerNorm(n)(torch.zeros(2, n + 2)),
        lambda: torch.nn.functional.cross_entropy(torch.zeros(2, n), torch.zeros(3).long()),
    )
    rng.choice(calls)()


def _forward_raises(rng: random.Random) -> None:
    import torch

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _nest(rng.randrange(3), lambda: _user_raise(rng))  # type: ignore[return-value]

    Net()(torch.zeros(1))


def _c10d_not_init(rng: random.Random) -> None:
    import torch
    import torch.distributed as dist

    rng.choice([lambda: dist.all_reduce(torch.ones(2)), dist.get_rank, dist.barrier])()


@contextlib.contextmanager
def _group() -> object:
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _c10d_misuse(rng: random.Random) -> None:
    import torch
    import torch.distributed as dist

    t = torch.ones(rng.randrange(1, 5))
    calls = (
        lambda: dist.broadcast(t, src=rng.randrange(2, 9)),
        lambda: dist.all_gather([t, t], t),
        lambda: dist.scatter(t, [t, t], src=0),
        lambda: dist.new_group([0, rng.randrange(2, 9)]),
        lambda: dist.all_to_all_single(torch.ones(t.numel() + 1), t),
        lambda: dist.all_gather_into_tensor(torch.ones(t.numel() + 2), t),
    )
    with _group():
        rng.choice(calls)()


def _store_unreachable(rng: random.Random) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=0.3))


# --- a third-party package ---------------------------------------------------------------
_PACKAGE = "vendorkit"
_PACKAGE_CODE = """
import os, socket


def deep(depth, fail):
    if depth:
        return deep(depth - 1, fail)
    return fail()


def run(depth, kind, text):
    def fail():
        if kind == "api":
            raise AttributeError(f"module 'vendorkit' has no attribute '{text}'")
        if kind == "signature":
            raise TypeError(f"run() got an unexpected keyword argument '{text}'")
        if kind == "import":
            raise ImportError(f"cannot load backend {text}")
        if kind == "open":
            return open(os.path.join("/nonexistent", text))
        if kind == "connect":
            s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
            return socket.create_connection(("127.0.0.1", port), timeout=2)
        raise {"value": ValueError, "runtime": RuntimeError}[kind](text)
    return deep(depth, fail)
"""


def install_package(root: Path) -> None:
    """A fake third-party package in a site-packages of a temporary directory."""
    package = root / "site-packages" / _PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("from vendorkit.core import run\n")
    (package / "core.py").write_text(_PACKAGE_CODE)
    sys.path.insert(0, str(root / "site-packages"))


def _package(kinds: tuple[str, ...]) -> Fault:
    def fault(rng: random.Random) -> None:
        import vendorkit  # type: ignore[import-not-found]

        vendorkit.run(rng.randrange(4), rng.choice(kinds), rng.choice(WORDS))

    return fault


def _package_in_dataset(rng: random.Random) -> None:
    _loader(rng, _package(("value", "runtime", "api")), 0)


def _package_in_forward(rng: random.Random) -> None:
    import torch

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            _package(("value", "runtime"))(rng)
            return x

    Net()(torch.zeros(1))


# kind: (fault, ground truth, why an engineer calls it that, phases it can happen in)
LATER, BEFORE_FIRST, BEFORE_INIT = "later", "before-first", "before-init"
ANY_PHASE = (BEFORE_INIT, BEFORE_FIRST, LATER)
KINDS: dict[str, tuple[Fault, str, str, tuple[str, ...]]] = {
    "plain-raise": (
        _plain_raise,
        UNKNOWN,
        "a plain raise in your own code or a package's, in "
        "no torch subsystem: nothing says whose fault it is; honest unknown",
        ANY_PHASE,
    ),
    "env-var": (
        _env_var,
        ENV,
        "os.environ[X] of a variable not set: the launch's environment",
        ANY_PHASE,
    ),
    "open-missing": (_open_missing, ENV, "a file the job needs is not there", ANY_PHASE),
    "pathlib-missing": (_pathlib_missing, ENV, "a file the job needs is not there", ANY_PHASE),
    "socket-refused": (
        _socket_refused,
        COMM,
        "a connection refused: nothing listens there",
        ANY_PHASE,
    ),
    "subprocess-fails": (
        _subprocess_fails,
        ENV,
        "a command the job runs failed: its setup",
        ANY_PHASE,
    ),
    "subprocess-missing": (
        _subprocess_missing,
        ENV,
        "a command the job runs is not installed",
        ANY_PHASE,
    ),
    "json-decode": (_json_decode, DATA, "a malformed JSON record in the data", ANY_PHASE),
    "pickle-cut": (
        _pickle_cut,
        ENV,
        "a pickled file cut short: the file is not whole (as a corrupt checkpoint is)",
        ANY_PHASE,
    ),
    "mp-context": (_multiprocessing_context, ENV, "multiprocessing set up wrongly", ANY_PHASE),
    "disk-full": (_disk_full, RES, "ENOSPC: the disk is full", ANY_PHASE),
    "memory": (_memory, RES, "MemoryError: the host cannot allocate", ANY_PHASE),
    "cuda-lazy-init": (_cuda, ENV, "CUDA asked of a CPU build: the install", ANY_PHASE),
    "dataset-raises": (
        _dataset_raises,
        DATA,
        "the dataset's __getitem__ raised (num_workers=0)",
        (BEFORE_FIRST, LATER),
    ),
    "worker-raises": (
        _worker_raises,
        DATA,
        "the dataset raised in a DataLoader worker",
        (BEFORE_FIRST, LATER),
    ),
    "collate-raises": (_collate_raises, DATA, "the collate_fn raised", (BEFORE_FIRST, LATER)),
    "backward-twice": (_backward_twice, MODEL, "autograd misuse", (BEFORE_FIRST, LATER)),
    "leaf-in-place": (
        _leaf_in_place,
        MODEL,
        "autograd misuse: a leaf changed in place",
        (BEFORE_FIRST, LATER),
    ),
    "grad-hook": (_grad_hook_raises, MODEL, "a gradient hook raised in backward", (LATER,)),
    "function-backward": (
        _function_backward_raises,
        MODEL,
        "a custom autograd Function's backward raised",
        (LATER,),
    ),
    "optimizer-bad": (
        _optimizer_bad,
        MODEL,
        "an optimizer given bad parameters or settings",
        (BEFORE_FIRST, LATER),
    ),
    "optimizer-state": (
        _optimizer_state,
        MODEL,
        "an optimizer state of another model, or a parameter in two groups",
        (BEFORE_FIRST, LATER),
    ),
    "load-corrupt": (_load_corrupt, ENV, "a checkpoint that is not whole", ANY_PHASE),
    "load-missing": (_load_missing, ENV, "a checkpoint that is not there", ANY_PHASE),
    "nn-shape": (
        _nn_shape,
        MODEL,
        "a shape or index that does not fit the model",
        (BEFORE_FIRST, LATER),
    ),
    "forward-raises": (_forward_raises, MODEL, "the model's forward raised", (LATER,)),
    "c10d-not-init": (
        _c10d_not_init,
        ENV,
        "a collective before init_process_group",
        (BEFORE_INIT,),
    ),
    "c10d-misuse": (
        _c10d_misuse,
        COMM,
        "a collective called with ranks or lists that do not fit the group",
        (BEFORE_FIRST, LATER),
    ),
    "store-unreachable": (
        _store_unreachable,
        ENV,
        "the rendezvous store is not reachable",
        (BEFORE_INIT,),
    ),
    "package-api": (
        _package(("api", "signature", "import")),
        ENV,
        "a package's API is not the one the code was written for: its version",
        ANY_PHASE,
    ),
    "package-open": (_package(("open",)), ENV, "a package opened a missing file", ANY_PHASE),
    "package-connect": (
        _package(("connect",)),
        COMM,
        "a package's connection was refused",
        ANY_PHASE,
    ),
    "package-in-dataset": (
        _package_in_dataset,
        DATA,
        "a package raised inside the dataset",
        (BEFORE_FIRST, LATER),
    ),
    "package-in-forward": (
        _package_in_forward,
        MODEL,
        "a package raised inside the model's forward",
        (LATER,),
    ),
}


def run_one(rng: random.Random, kind: str) -> str:
    """The traceback of one fault of `kind`, raised `depth` user calls down."""
    fault = KINDS[kind][0]
    try:
        _nest(rng.randrange(5), lambda: fault(rng))
    except BaseException:
        return traceback.format_exc()
    raise AssertionError(f"fault {kind} did not raise")


def _log(rng: random.Random, tb: str, phase: str) -> str:
    chatter = "".join(f"step {i} {rng.choice(WORDS)} {rng.random():.3f}\n" for i in range(3))
    if phase == BEFORE_INIT:
        return chatter + tb
    return chatter + "".join(f"[rank0]:{line}\n" for line in tb.splitlines())


def _beat(phase: str, rng: random.Random) -> dict[str, object]:
    seq = {BEFORE_INIT: None, BEFORE_FIRST: 0}.get(phase, rng.randrange(1, 500))
    return {"version": 1, "pid": 1, "time": 1.0, "since": 1.0, "frames": [], "seq": seq}


def generate(out: Path, seed: int, count: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    _WORK[:] = [out / "work"]
    _WORK[0].mkdir(parents=True, exist_ok=True)
    install_package(out / "package")
    faults = []
    for index in range(count):
        kind = rng.choice(sorted(KINDS))
        _, truth, why, phases = KINDS[kind]
        phase = rng.choice(phases)
        directory = out / f"{index:04d}"
        (directory / "beats").mkdir(parents=True)
        (directory / "rank0.log").write_text(_log(rng, run_one(rng, kind), phase))
        beat = json.dumps(_beat(phase, rng))
        (directory / "beats" / "rank0.json").write_text(beat)
        faults.append({"dir": str(directory), "kind": kind, "truth": truth, "why": why})
    (out / "faults.json").write_text(json.dumps(faults, indent=1))
    return faults


def read_faults(out: Path) -> list[dict[str, object]]:
    faults: list[dict[str, object]] = json.loads((out / "faults.json").read_text())
    return faults


def classify(directory: Path) -> tuple[str, str | None]:
    """(class, signature id) for one generated fault, as diagnose() gives it for a rank log."""
    from safelaunch.diagnose import diagnose
    from safelaunch.outcome import AttemptStatus, Outcome, RankEnding, RankResult

    log = directory / "rank0.log"
    rank = RankResult(
        rank=0,
        local_rank=0,
        pid=1,
        state=RankEnding.FAILED,
        exit_code=1,
        signal=None,
        ended_after=1.0,
        log_path=log,
        error_file=None,
    )
    outcome = Outcome(
        attempt=0,
        status=AttemptStatus.FAILED,
        ranks=(rank,),
        first_failure=rank,
        interrupt_signal=None,
        exit_code=1,
        duration=1.0,
        strays_ended=0,
        log_problems=(),
        run_dir=directory,
        attempt_dir=directory,
    )
    found = diagnose(outcome, heartbeat_dir=directory / "beats")
    return str(found.klass), found.signature.id if found.signature else None


@contextlib.contextmanager
def without_layers() -> Iterator[None]:
    """The pipeline as it was before the layers: signatures, exception types, unknown."""
    from safelaunch.diagnose import rootcause

    def types_only(rank: object, error: object) -> tuple[object, None]:
        line = getattr(error, "line", "")
        return next(iter(rootcause.matches(line, None, rootcause.EXCEPTION_TYPES)), None), None

    kept = rootcause._from_layers
    rootcause._from_layers = types_only  # type: ignore[assignment]
    try:
        yield
    finally:
        rootcause._from_layers = kept


def score(faults: list[dict[str, object]]) -> dict[str, object]:
    """% unknown, % agreeing with the ground truth, the misses by kind, what decided."""
    misses: dict[str, list[str]] = {}
    deciders: dict[str, int] = {}
    unknown = agree = 0
    for fault in faults:
        klass, signature = classify(Path(str(fault["dir"])))
        unknown += klass == UNKNOWN
        agree += klass == fault["truth"]
        decider = (
            "layers"
            if signature and signature.startswith("layer-")
            else (
                "exception type"
                if signature and signature.startswith("python-")
                else "signature"
                if signature
                else "none"
            )
        )
        deciders[decider] = deciders.get(decider, 0) + 1
        if klass != fault["truth"]:
            misses.setdefault(str(fault["kind"]), []).append(f"{klass} ({signature})")
    count = max(len(faults), 1)
    return {
        "count": len(faults),
        "unknown": 100.0 * unknown / count,
        "agreement": 100.0 * agree / count,
        "misses": misses,
        "decided_by": deciders,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=40)
    args = parser.parse_args()
    generate(args.out, args.seed, args.count)


if __name__ == "__main__":
    main()
