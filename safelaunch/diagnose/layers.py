"""Which layer of the program raised: a traceback read as frames of code, not as words.

A rank's last traceback says, frame by frame, whose code was running: the user's, the
standard library's (environment, files, sockets, subprocess, json/pickle,
multiprocessing), one of torch's subsystems (cuda, data loading, autograd, optim,
serialization, distributed, nn) or a third-party package's. With the errno of an
OSError, the signal of a death and how far the rank had got (before
init_process_group, before its first collective, later) that is a `Fault`: the
evidence layerclass.py derives a class from. Pure: text and numbers in, a record out.
"""

from __future__ import annotations

import builtins
import errno
import re
from dataclasses import dataclass

from safelaunch.diagnose.frames import DUMP_FRAME, RANK_MARKER, TRACEBACK_FRAME
from safelaunch.vocab import StrEnum


class Layer(StrEnum):
    """Whose code a frame is."""

    USER = "your code"
    STDLIB_ENV = "the standard library's os.environ"
    STDLIB_FILES = "the standard library's file access"
    STDLIB_NET = "the standard library's networking"
    STDLIB_SUBPROCESS = "the standard library's subprocess"
    STDLIB_DECODE = "the standard library's json/pickle"
    STDLIB_MP = "the standard library's multiprocessing"
    STDLIB = "the standard library"
    TORCH_CUDA = "torch.cuda"
    TORCH_DATA = "torch.utils.data"
    TORCH_AUTOGRAD = "torch.autograd"
    TORCH_OPTIM = "torch.optim"
    TORCH_SERIALIZATION = "torch.serialization"
    TORCH_DISTRIBUTED = "torch.distributed"
    TORCH_NN = "torch.nn"
    TORCH_TENSOR = "torch's tensor operations"
    TORCH = "torch"
    THIRD_PARTY = "a third-party package"
    WRAPPER = "safelaunch's rank wrapper"  # never a layer of its own: skipped


class Phase(StrEnum):
    """How far the rank had got in torch.distributed when it failed."""

    BEFORE_INIT = "before init_process_group"
    AT_INIT = "in init_process_group"
    BEFORE_FIRST = "after init_process_group, before the first collective"
    LATER = "after collectives had run"
    AFTER_INIT = "after init_process_group"  # how many collectives since: not known


@dataclass(frozen=True, slots=True)
class Frame:
    path: str
    line: int
    func: str
    layer: Layer

    @property
    def place(self) -> str:
        return f"{self.path}:{self.line} in {self.func}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """One failure as its traceback's layers show it."""

    exception: str | None  # the type, unqualified: "KeyError", "CalledProcessError"
    errno: int | None
    signum: int | None
    frames: tuple[Frame, ...]  # outermost first, wrapper frames left out
    phase: Phase | None  # None: not known
    collectives: int | None = None  # how many the rank had issued, when known
    package: str | None = None  # the third-party package that raised, if one did

    @property
    def raised_in(self) -> Layer | None:
        return self.frames[-1].layer if self.frames else None

    @property
    def within(self) -> Layer | None:
        """The innermost torch subsystem on the stack: whose call the failing code was in."""
        return next((f.layer for f in reversed(self.frames) if f.layer in TORCH_LAYERS), None)

    def on_stack(self, layer: Layer) -> bool:
        return any(f.layer == layer for f in self.frames)

    @property
    def user(self) -> Frame | None:
        return next((f for f in reversed(self.frames) if f.layer == Layer.USER), None)


# torch's subsystems; plain TORCH (torch/_ops.py, torch/__init__.py) names none
TORCH_LAYERS = frozenset(layer for layer in Layer if layer.name.startswith("TORCH_"))

# torch's subsystems by the path below torch/, first match wins
_TORCH_PARTS: tuple[tuple[str, Layer], ...] = (
    ("cuda/", Layer.TORCH_CUDA),
    ("utils/data/", Layer.TORCH_DATA),
    ("autograd/", Layer.TORCH_AUTOGRAD),
    ("optim/", Layer.TORCH_OPTIM),
    ("serialization.py", Layer.TORCH_SERIALIZATION),
    ("distributed/", Layer.TORCH_DISTRIBUTED),
    ("nn/", Layer.TORCH_NN),
    ("functional.py", Layer.TORCH_TENSOR),
    ("_tensor.py", Layer.TORCH_TENSOR),  # Tensor.backward: see _frame()
    ("_refs/", Layer.TORCH_TENSOR),
    ("_prims", Layer.TORCH_TENSOR),
    ("_decomp/", Layer.TORCH_TENSOR),
)
# the standard library's modules by file (`<frozen os>` in 3.11+, `.../os.py` before)
_STDLIB_MODULES: tuple[tuple[tuple[str, ...], Layer], ...] = (
    (("os",), Layer.STDLIB_ENV),
    (("pathlib", "shutil", "tempfile", "glob", "io", "_pyio", "genericpath"), Layer.STDLIB_FILES),
    (("socket", "ssl", "http", "urllib", "socketserver", "selectors"), Layer.STDLIB_NET),
    (("subprocess",), Layer.STDLIB_SUBPROCESS),
    (("json", "pickle", "_compat_pickle", "copyreg", "marshal"), Layer.STDLIB_DECODE),
    (("multiprocessing", "concurrent"), Layer.STDLIB_MP),
)
_INSTALLED = re.compile(r"/(?:site|dist)-packages/(?P<package>[^/]+)")
_STDLIB_PATH = re.compile(r"/lib/python\d[\d.]*/(?P<module>[^/]+?)(?:\.py)?(?:/|$)")
_FROZEN = re.compile(r"^<frozen (?P<module>[\w.]+)>$")
_ERRNO = re.compile(r"\[Errno (?P<n>\d+)\]|\bError code (?P<code>\d+)\b")
_ERRNO_OF_TYPE = {  # OSError subclasses whose type says the errno
    "FileNotFoundError": errno.ENOENT,
    "PermissionError": errno.EACCES,
    "ConnectionRefusedError": errno.ECONNREFUSED,
    "ConnectionResetError": errno.ECONNRESET,
    "BrokenPipeError": errno.EPIPE,
    "IsADirectoryError": errno.EISDIR,
    "NotADirectoryError": errno.ENOTDIR,
}
# OSError and its subclasses by name (builtins, and the library's own: urllib's URLError,
# socket's gaierror, ssl's SSLError); RuntimeError for torch's allocator's "Error code 12"
_OS_ERRORS = frozenset(
    {
        name
        for name, obj in vars(builtins).items()
        if isinstance(obj, type) and issubclass(obj, OSError)
    }
    | {"URLError", "HTTPError", "gaierror", "herror", "timeout", "SSLError", "RuntimeError"}
)
_INIT_FUNCS = frozenset(
    {"init_process_group", "rendezvous", "_create_c10d_store", "_env_rendezvous_handler"}
    | {"_tcp_rendezvous_handler", "_store_based_barrier", "_new_process_group_helper"}
)
_TRACEBACK = "Traceback (most recent"
_ORIGINAL = "Original Traceback (most recent call last):"


def layer_of(path: str, func: str = "") -> Layer:
    """The layer a frame's file belongs to."""
    if "safelaunch/rank/" in path:
        return Layer.WRAPPER
    installed = _INSTALLED.search(path)
    if installed is not None:
        if installed["package"] != "torch":
            return Layer.THIRD_PARTY
        below = path[installed.end() + 1 :]
        if below == "_tensor.py" and func == "backward":
            return Layer.TORCH_AUTOGRAD
        return next((layer for part, layer in _TORCH_PARTS if below.startswith(part)), Layer.TORCH)
    module = _FROZEN.match(path) or _STDLIB_PATH.search(path)
    if module is None:
        return Layer.USER
    name = module["module"].split(".")[0]
    return next((layer for names, layer in _STDLIB_MODULES if name in names), Layer.STDLIB)


def _frames(lines: list[str], pattern: re.Pattern[str]) -> tuple[list[Frame], int]:
    """The frames from the top of `lines` and the index of the first line after them."""
    frames: list[Frame] = []
    for index, line in enumerate(lines):
        match = pattern.match(line)
        if match:
            path, func = match["path"], match["func"].strip()
            frames.append(Frame(path, int(match["line"]), func, layer_of(path, func)))
        elif line and not line[0].isspace():
            return frames, index
    return frames, len(lines)


def _error_line(lines: list[str], at: int) -> str:
    return lines[at].strip() if at < len(lines) else ""


def _exception(line: str) -> str | None:
    head = line.split(":", 1)[0].strip()
    if not head or not re.fullmatch(r"[\w.]+", head):
        return None
    return head.rsplit(".", 1)[-1]


def _errno(line: str, exception: str | None) -> int | None:
    """An OSError's errno (`[Errno 28]`, torch's allocator's `Error code 12`); the errno
    words in another exception's message are only words."""
    if exception not in _OS_ERRORS:
        return None
    found = _ERRNO.search(line)
    if found is not None and (found["n"] is None or exception != "RuntimeError"):
        return int(found["n"] or found["code"])
    return _ERRNO_OF_TYPE.get(exception or "")


def _faulthandler_frames(lines: list[str]) -> list[Frame]:
    """The crashing thread's stack in faulthandler's dump (innermost first there)."""
    for start, line in enumerate(lines):
        if line.startswith("Current thread"):
            frames, _ = _frames(
                [f"  {x.strip()}" for x in lines[start + 1 :] if x.strip()], DUMP_FRAME
            )
            return frames[::-1]
    return []


def _phase(frames: list[Frame], marked: bool, seq: int | None, beat: bool) -> Phase | None:
    """In init_process_group (on the stack), else what the heartbeat record's collective
    count says (none: it never joined a group), else after init when torch marked the
    log's lines (`[rankN]:` follows init_process_group), else not known."""
    if any(f.layer == Layer.TORCH_DISTRIBUTED and f.func in _INIT_FUNCS for f in frames):
        return Phase.AT_INIT
    if seq is not None:
        return Phase.BEFORE_FIRST if seq == 0 else Phase.LATER
    if beat:
        return Phase.BEFORE_INIT
    return Phase.AFTER_INIT if marked else None


def read_fault(
    text: str, *, signum: int | None = None, seq: int | None = None, beat: bool = False
) -> Fault | None:
    """The last traceback in a rank's log as layers; None when it has none (nor a dump).

    `seq`: the collectives the rank had issued by its last heartbeat record; `beat`: a
    record was read at all (then a `seq` of None means it never joined a group). A
    DataLoader worker's own traceback ("Original Traceback") is the inner part of the
    stack: its frames follow the rank's, its error line is the one that says why.
    """
    raw = text.splitlines()
    marked = any(RANK_MARKER.match(line) for line in raw[-200:])
    lines = [RANK_MARKER.sub("", line) for line in raw]
    starts = [i for i, line in enumerate(lines) if line.startswith(_TRACEBACK)]
    if starts:
        body = lines[starts[-1] + 1 :]
        frames, at = _frames(body, TRACEBACK_FRAME)
        error = _error_line(body, at)
        if _ORIGINAL in body[at:]:
            inner = body[body.index(_ORIGINAL, at) + 1 :]
            more, inner_at = _frames(inner, TRACEBACK_FRAME)
            frames, error = frames + more, _error_line(inner, inner_at) or error
    else:
        frames, error = _faulthandler_frames(lines), ""
        if not frames and signum is None:
            return None
    frames = [f for f in frames if f.layer != Layer.WRAPPER]
    exception = _exception(error)
    package = None
    if frames and frames[-1].layer == Layer.THIRD_PARTY:
        found = _INSTALLED.search(frames[-1].path)
        package = found["package"] if found else None
    return Fault(
        exception=exception,
        errno=_errno(error, exception),
        signum=signum,
        frames=tuple(frames),
        phase=_phase(frames, marked, seq, beat),
        collectives=seq,
        package=package,
    )
