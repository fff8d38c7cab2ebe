"""Python's own exception types, as data beside the signatures.

Used only when no signature matches the failing rank's log: the exception type of
its error line still says which class the failure is in. Matched against that one
line (a module name in an ImportError elsewhere in a log is not a failure). Whatever
its type, an error line that says a loss or a gradient is NaN/inf is model/gradient
(`assert not math.isnan(loss)`, `raise ValueError(f"loss is {loss}")`).
"""

from __future__ import annotations

from safelaunch.diagnose.signatures import Signature
from safelaunch.vocab import DATA, ENVIRONMENT, MODEL, RESOURCES, UNKNOWN

_QUALIFIED = r"^(?:[\w.]+\.)?"  # `torch.OutOfMemoryError:`, `builtins.MemoryError:`

# NaN/inf said of a loss (or a gradient), in either order: "loss is NaN", "Loss became
# infinite", "loss = tensor(nan)", "{'loss': -inf}", "NaN loss", "nan values in the loss".
# The value is a word of its own: not the "nan" of "nanny" or "financial", the "inf" of
# "info" or "infinite_loop_guard", nor the "-inf" of "1e-inf". The words between hold no
# number: in "loss 0.31 (best: inf)" the loss is finite. Before the subject a bare "inf"
# does not count: "INF" is a log level ("INF loss=0.3").
_GAP = r"[^\d\n]{0,48}?"
_VALUE_AFTER = r"(?:^|[^\w.+\-\n])[-+]?(?:nans?|infs?|infinity|infinite|non-finite|not finite)\b"
_VALUE_BEFORE = r"(?:^|[^\w.+\-\n])[-+]?(?:nans?|infinite|non-finite)\b"
LOSS = r"loss(?:es)?"  # "val_loss", "train/loss", "losses" (not "loss_scale", "gloss")
GRADIENT = r"grad(?:ient)?s?(?:[ _]?norms?)?"  # "grad_norm", "gradients" (not "grad_fn")


def non_finite(subject: str) -> str:
    """A pattern for a NaN/inf value said of `subject` (a regular expression), on one line."""
    word = rf"(?:^|[^A-Za-z\n])(?:{subject})\b"
    return rf"(?im)(?:{word}{_GAP}{_VALUE_AFTER}|{_VALUE_BEFORE}{_GAP}{word})"


EXCEPTION_TYPES: tuple[Signature, ...] = (
    Signature(  # before python-import-error: the module is there, a name in it is not
        id="python-import-name",
        klass=ENVIRONMENT,
        patterns=(_QUALIFIED + r"ImportError: cannot import name\b",),
        meaning="the module is installed but has no such name: another version of it than the "
        "code expects (or a circular import, when the message says so)",
        next_steps=(
            "compare the installed version with the one the code needs (pip show <package>) "
            "and pin it in the requirements",
            "a circular import: import the module, not the name, or import inside the function",
        ),
    ),
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
    Signature(  # no class of its own: a missing base case is in any code
        id="python-recursion-error",
        klass=UNKNOWN,
        patterns=(_QUALIFIED + r"RecursionError\b",),
        meaning="a function called itself without end (or walked data nested deeper than "
        "Python's recursion limit)",
        next_steps=(
            "the location is the recursing function: look for the missing base case, or a "
            "cycle in the data it walks",
            "only for data truly that deep: sys.setrecursionlimit(...)",
        ),
    ),
    # last: an error's own type, where it has a class, says more than its words
    Signature(
        id="non-finite-loss",
        klass=MODEL,
        patterns=(non_finite(f"{LOSS}|{GRADIENT}"),),
        meaning="the program stopped on a NaN/inf loss or gradient (its own check or a library's)",
        next_steps=(
            "lower the learning rate; check inputs for NaN; try gradient clipping",
            "torch.autograd.set_detect_anomaly(True) names the operation that made the first NaN",
            "look at BatchNorm with tiny batches, log/sqrt/div of zero, fp16 overflow",
        ),
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
