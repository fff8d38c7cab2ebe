"""Python's own exception types, as data beside the signatures.

Used only when no signature matches the failing rank's log: the exception type of
its error line still says which class the failure is in. Matched against that one
line (a module name in an ImportError elsewhere in a log is not a failure).
"""

from __future__ import annotations

from safelaunch.diagnose.signatures import Signature
from safelaunch.vocab import DATA, ENVIRONMENT, MODEL, RESOURCES

_QUALIFIED = r"^(?:[\w.]+\.)?"  # `torch.OutOfMemoryError:`, `builtins.MemoryError:`

EXCEPTION_TYPES: tuple[Signature, ...] = (
    Signature(
        id="python-import-error",
        klass=ENVIRONMENT,
        patterns=(_QUALIFIED + r"(?:ModuleNotFoundError|ImportError)\b",),
        meaning="a module the script imports is missing (or broken) in the ranks' environment",
        next_steps=(
            "install it into the interpreter the ranks run (the one safelaunch runs under)",
            "check PYTHONPATH and the working directory (the script's directory is sys.path[0])",
        ),
    ),
    Signature(
        id="python-missing-file",
        klass=ENVIRONMENT,
        patterns=(_QUALIFIED + r"(?:FileNotFoundError|NotADirectoryError|IsADirectoryError)\b",),
        meaning="a path the job needs does not exist here (data, checkpoint, config)",
        next_steps=(
            "relative paths are taken from the working directory, not the script's",
            "on several nodes: is the path mounted on every node?",
        ),
    ),
    Signature(
        id="python-permission-error",
        klass=ENVIRONMENT,
        patterns=(_QUALIFIED + r"PermissionError\b",),
        meaning="the job may not read or write a path it needs",
        next_steps=("check the owner and mode of the path shown (ls -ld)",),
    ),
    Signature(
        id="store-rendezvous-error",
        klass=ENVIRONMENT,
        patterns=(_QUALIFIED + r"Dist(?:Store|Network)Error\b",),
        meaning="the ranks could not meet through the TCPStore: a rank missing or late, a "
        "world size that does not match the launch, or the store unreachable",
        next_steps=(
            "leave rank and world_size to the launcher (init_process_group reads them from "
            "the environment)",
            "check that every rank started (their logs) and MASTER_ADDR:MASTER_PORT is reachable",
        ),
    ),
    Signature(
        id="python-memory-error",
        klass=RESOURCES,
        patterns=(_QUALIFIED + r"MemoryError\b",),
        meaning="the host ran out of memory (Python could not allocate)",
        next_steps=("lower batch size or DataLoader workers; check memory per rank x ranks",),
    ),
    Signature(
        id="python-stop-iteration",
        klass=DATA,
        patterns=(_QUALIFIED + r"StopIteration\b",),
        meaning="next() on an iterator that ran out: this rank's data ended before its loop",
        next_steps=(
            "give every rank the same number of batches: DistributedSampler(drop_last=True)",
            "loop over the DataLoader, not a fixed step count, or re-create its iterator",
        ),
    ),
    Signature(
        id="python-decode-error",
        klass=DATA,
        patterns=(_QUALIFIED + r"Unicode(?:De|En)codeError\b",),
        meaning="a data file is not in the encoding the code reads it with",
        next_steps=("open it with the right encoding=..., or find the corrupt record",),
    ),
    Signature(
        id="python-numeric-error",
        klass=MODEL,
        patterns=(_QUALIFIED + r"(?:ZeroDivisionError|FloatingPointError|OverflowError)\b",),
        meaning="a numeric error in the computation (division by zero, overflow)",
        next_steps=("check the values at the line shown (an empty batch, a zero count)",),
    ),
)

RANK_LEFT_EARLY = Signature(
    id="rank-left-early",
    klass=DATA,
    meaning="a rank ended while its peers still communicated: the ranks ran different amounts "
    "of work (uneven data, a stray return or sys.exit on one rank)",
    next_steps=(
        "give every rank the same number of batches: DistributedSampler(drop_last=True), "
        "or pad the dataset to a multiple of the world size",
        "for inputs that are uneven by nature: with model.join(): "
        "(torch.distributed.algorithms.Join)",
        "every rank takes the same exit path; end with dist.barrier() then "
        "dist.destroy_process_group()",
    ),
)
