"""A class from the traceback's layers: the rules table of docs/signatures.md, as data.

Consulted after the message signatures (which name a failure more precisely: a match
there wins), in three stages around Python's exception types (pytypes.py): the
*context* rows first (the torch subsystem the failing code ran inside, an environment
variable os.environ lacks: a FileNotFoundError in a dataset's __getitem__ is a data
fault, not a missing file of the job's), then the exception types, then the *general*
rows (the errno, the standard library module, a third-party package). Rows are tried
in order; every condition a row gives must hold. Memory running out is never a context
row's: it is resources wherever it raised. Where no row fits, `describe` says what was
seen and which file to read: an honest "unknown", never a bare one.
"""

from __future__ import annotations

import errno
import signal
from dataclasses import dataclass

from safelaunch.diagnose.layers import Fault, Layer, Phase
from safelaunch.diagnose.signatures import Signature
from safelaunch.vocab import (
    COMMUNICATION,
    DATA,
    ENVIRONMENT,
    MODEL,
    RESOURCES,
    FailureClass,
    StrEnum,
)

_EMPTY: frozenset[Layer] = frozenset()
_MEMORY = frozenset({"MemoryError", "OutOfMemoryError"})


class Stage(StrEnum):
    """When a rule is tried: before Python's exception types (what the failing code ran
    inside) or after them (errno, standard-library module, third-party package)."""

    CONTEXT = "context"
    GENERAL = "general"


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerRule:
    """One row: conditions on a Fault (all that are given must hold), a class, advice."""

    id: str
    klass: FailureClass
    meaning: str
    next_steps: tuple[str, ...]
    on_stack: frozenset[Layer] = _EMPTY  # a frame of one of these anywhere on the stack
    within: frozenset[Layer] = _EMPTY  # the innermost torch subsystem on the stack
    raised_in: frozenset[Layer] = _EMPTY  # the innermost frame's layer
    exceptions: frozenset[str] = frozenset()
    errnos: frozenset[int] = frozenset()
    phases: frozenset[Phase] = frozenset()
    stage: Stage = Stage.GENERAL

    def fits(self, fault: Fault) -> bool:
        if self.stage == Stage.CONTEXT and fault.exception in _MEMORY:
            return False
        return (
            (not self.on_stack or any(fault.on_stack(layer) for layer in self.on_stack))
            and (not self.within or fault.within in self.within)
            and (not self.raised_in or fault.raised_in in self.raised_in)
            and (not self.exceptions or fault.exception in self.exceptions)
            and (not self.errnos or fault.errno in self.errnos)
            and (not self.phases or fault.phase in self.phases)
        )


def _layers(*layers: Layer) -> frozenset[Layer]:
    return frozenset(layers)


_RUNNING_OUT = frozenset({errno.ENOSPC, errno.ENOMEM, errno.EMFILE, errno.ENFILE, errno.EDQUOT})
_NETWORK = frozenset(
    {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT}
    | {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EPIPE}
)
_PATHS = frozenset(
    {errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOTDIR}
    | {errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP}
)
_CHECK_PATHS = "print the path and check it on every node: ls -ld <path> (relative paths are from "
_SETUP = frozenset({Phase.BEFORE_INIT, Phase.AT_INIT})

LAYER_RULES: tuple[LayerRule, ...] = (
    LayerRule(
        id="running-out",
        stage=Stage.CONTEXT,
        klass=RESOURCES,
        errnos=_RUNNING_OUT,
        meaning="an OSError whose errno says something ran out: disk space (ENOSPC, EDQUOT), "
        "memory (ENOMEM) or file descriptors (EMFILE, ENFILE)",
        next_steps=(
            "df -h and free -g on the node; ulimit -n for open files",
            "fewer DataLoader workers, smaller batches, fewer checkpoints kept",
        ),
    ),
    LayerRule(
        id="data-loading",
        stage=Stage.CONTEXT,
        klass=DATA,
        on_stack=_layers(Layer.TORCH_DATA),
        meaning="it raised while a DataLoader fetched a batch: the dataset's __getitem__, its "
        "transforms, the sampler or the collate_fn",
        next_steps=(
            "the innermost frame of your code below torch.utils.data is the sample's code",
            "rerun with num_workers=0 to debug the sample in the main process",
        ),
    ),
    LayerRule(
        id="autograd",
        stage=Stage.CONTEXT,
        klass=MODEL,
        within=_layers(Layer.TORCH_AUTOGRAD),
        meaning="autograd raised (backward, a gradient hook, a custom Function)",
        next_steps=(
            "torch.autograd.set_detect_anomaly(True) names the forward operation",
            "one backward per forward; no in-place change of a tensor autograd saved",
        ),
    ),
    LayerRule(
        id="optimizer",
        stage=Stage.CONTEXT,
        klass=MODEL,
        within=_layers(Layer.TORCH_OPTIM),
        meaning="an optimizer or LR scheduler raised: its parameters, state or arguments",
        next_steps=(
            "pass model.parameters() (leaf tensors that require grad), not tensors or an "
            "empty list; give each parameter to one group only",
            "a loaded optimizer state must come from the same model and optimizer",
        ),
    ),
    LayerRule(
        id="model",
        stage=Stage.CONTEXT,
        klass=MODEL,
        within=_layers(Layer.TORCH_NN, Layer.TORCH_TENSOR),
        meaning="the model or a tensor operation raised (torch.nn, torch.functional): a "
        "shape, dtype or device that does not fit, or a module used wrongly",
        next_steps=("print the shapes, dtypes and devices of the inputs at the line shown",),
    ),
    LayerRule(
        id="checkpoint",
        stage=Stage.CONTEXT,
        klass=ENVIRONMENT,
        within=_layers(Layer.TORCH_SERIALIZATION),
        meaning="torch.save or torch.load failed: the checkpoint file (missing, cut short, "
        "another format) or the place it is written to",
        next_steps=(
            "ls -l the file and compare its size with a good one; head -c 200 shows what it is",
            "save to a temporary name, then os.replace() it, so a killed save leaves no half file",
        ),
    ),
    LayerRule(
        id="cuda",
        stage=Stage.CONTEXT,
        klass=ENVIRONMENT,
        within=_layers(Layer.TORCH_CUDA),
        meaning="torch.cuda raised: this torch build, the driver or the visible GPUs do not "
        "offer what the code asks for",
        next_steps=(
            "python -c 'import torch; print(torch.version.cuda, torch.cuda.device_count())' "
            "with the ranks' environment",
            "check CUDA_VISIBLE_DEVICES and nvidia-smi; on CPU keep tensors on 'cpu'",
        ),
    ),
    LayerRule(
        id="c10d-setup",
        stage=Stage.CONTEXT,
        klass=ENVIRONMENT,
        within=_layers(Layer.TORCH_DISTRIBUTED),
        phases=_SETUP,
        meaning="torch.distributed failed while the ranks set up (rendezvous, the store, "
        "the backend) or was used before init_process_group",
        next_steps=(
            "check MASTER_ADDR/MASTER_PORT, the backend and that every rank started (their logs)",
            "call init_process_group() before any collective",
        ),
    ),
    LayerRule(
        id="c10d",
        stage=Stage.CONTEXT,
        klass=COMMUNICATION,
        within=_layers(Layer.TORCH_DISTRIBUTED),
        meaning="torch.distributed raised after the group was set up: a collective, the "
        "store or a peer",
        next_steps=(
            "every rank must call the same collectives in the same order with the same shapes",
            "look at the other ranks' logs: the first to fail is often the cause",
        ),
    ),
    LayerRule(
        id="env-var",
        stage=Stage.CONTEXT,
        klass=ENVIRONMENT,
        raised_in=_layers(Layer.STDLIB_ENV),
        exceptions=frozenset({"KeyError"}),
        meaning="os.environ[...] of a variable that is not set in the ranks' environment",
        next_steps=(
            "export it before launching (the ranks inherit the launcher's environment), or "
            "read it with os.environ.get(name, default)",
        ),
    ),
    LayerRule(
        id="network-errno",
        klass=COMMUNICATION,
        errnos=_NETWORK,
        meaning="a connection failed (refused, reset, timed out, no route): the other end "
        "is not listening or not reachable",
        next_steps=("check the host and port the code connects to, and that its server runs",),
    ),
    LayerRule(
        id="network",
        klass=COMMUNICATION,
        raised_in=_layers(Layer.STDLIB_NET),
        meaning="networking in the standard library raised (socket, ssl, http, urllib)",
        next_steps=("check the address, the port and that the server is reachable from here",),
    ),
    LayerRule(
        id="path",
        klass=ENVIRONMENT,
        errnos=_PATHS,
        meaning="a path the job needs is missing, or may not be read or written (its errno)",
        next_steps=(_CHECK_PATHS + "the working directory)",),
    ),
    LayerRule(
        id="files",
        klass=ENVIRONMENT,
        raised_in=_layers(Layer.STDLIB_FILES),
        meaning="file access in the standard library raised (pathlib, shutil, tempfile)",
        next_steps=(_CHECK_PATHS + "the working directory)",),
    ),
    LayerRule(
        id="subprocess",
        klass=ENVIRONMENT,
        raised_in=_layers(Layer.STDLIB_SUBPROCESS),
        meaning="a command the script runs failed or is missing (subprocess)",
        next_steps=("run the command by hand in the ranks' environment; check PATH",),
    ),
    LayerRule(
        id="decode",
        klass=DATA,
        exceptions=frozenset({"JSONDecodeError"}),
        meaning="json could not parse its input: a malformed record in a data file",
        next_steps=("find the record at the line and column shown; regenerate or skip it",),
    ),
    LayerRule(
        id="unpickle",
        klass=ENVIRONMENT,
        exceptions=frozenset({"UnpicklingError"}),
        meaning="pickle could not read a file: cut short or not a pickle at all (as a corrupt "
        "checkpoint: a save that was killed, a copy that did not finish)",
        next_steps=(
            "ls -l the file and compare its size with a good one; regenerate it",
            "write such files to a temporary name, then os.replace() them",
        ),
    ),
    LayerRule(
        id="multiprocessing",
        klass=ENVIRONMENT,
        raised_in=_layers(Layer.STDLIB_MP),
        meaning="multiprocessing failed to start or reach a process (start method, pickling "
        "what a child gets)",
        next_steps=(
            "under spawn/forkserver everything passed to a child must pickle: no lambdas or "
            "local functions; guard the entry point with if __name__ == '__main__'",
        ),
    ),
    LayerRule(
        id="package-api",
        klass=ENVIRONMENT,
        raised_in=_layers(Layer.THIRD_PARTY),
        exceptions=frozenset({"ImportError", "ModuleNotFoundError", "AttributeError", "TypeError"}),
        meaning="a third-party package raised an ImportError, AttributeError or TypeError: "
        "most often another version of it than the code was written for",
        next_steps=("pip show <package>: compare its version with the one the code needs; pin it",),
    ),
)


def layer_class(fault: Fault, stage: Stage) -> Signature | None:
    """The first row of `stage` that fits, as a signature."""
    for rule in LAYER_RULES:
        if rule.stage == stage and rule.fits(fault):
            return Signature(
                id=f"layer-{rule.id}",
                klass=rule.klass,
                meaning=rule.meaning,
                next_steps=rule.next_steps,
            )
    return None


def _phase(fault: Fault) -> str:
    if fault.phase == Phase.LATER and fault.collectives is not None:
        return f"after {fault.collectives} collective(s)"
    return fault.phase.value if fault.phase is not None else ""


def describe(fault: Fault) -> str:
    """What the layers show: `KeyError raised in your code, errno 2 (ENOENT), after 3
    collective(s); read train.py:12 first` (a library's frame is named where it raised)."""
    parts = [fault.exception or "the error"]
    raised = fault.frames[-1] if fault.frames else None
    if raised is not None:
        layer = raised.layer.value + (f" '{fault.package}'" if fault.package else "")
        parts = [f"{parts[0]} raised in {layer}"]
        if fault.within is not None and fault.within != raised.layer:
            parts.append(f"inside {fault.within.value}")
    if fault.errno is not None:
        parts.append(f"errno {fault.errno} ({errno.errorcode.get(fault.errno, '?')})")
    if fault.signum is not None:
        names = {int(s): s.name for s in signal.Signals}
        parts.append(f"died of {names.get(fault.signum, f'signal {fault.signum}')}")
    if _phase(fault):
        parts.append(_phase(fault))
    user = fault.user
    if raised is not None and raised is not user:
        called = f", called from {user.path}:{user.line}" if user is not None else ""
        parts.append(f"read {raised.path}:{raised.line} first{called}")
    elif user is not None:
        parts.append(f"read {user.path}:{user.line} first")
    return ", ".join(parts)
