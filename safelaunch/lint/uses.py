"""What a script asks of the machine, read from lint's parse: CUDA, NCCL, variables, files.

Preflight compares these with what the machine offers (preflight/crosscheck.py). Only
what the script does unconditionally counts: a use under a guard (`if
torch.cuda.is_available():`, `if "X" in os.environ:`, `if os.path.exists(p):`, inside a
`try` that catches the error) is the script handling the case itself, and no warning.
Computed once per script content with the lint findings and cached beside them.
"""

from __future__ import annotations

import ast

from safelaunch.lint import ScriptUses
from safelaunch.lint.scan import Call, Script

# torch.cuda calls that need a CUDA build and a GPU (is_available(), device_count(),
# manual_seed_all() ... are fine without one)
_CUDA_CALLS = frozenset(
    {"set_device", "current_device", "synchronize", "Stream", "Event", "mem_get_info"}
    | {"get_device_properties", "get_device_capability", "set_per_process_memory_fraction"}
)
_GUARD_WORDS = ("is_available", "device_count", "exists", "isfile", "is_file", "getenv")
_FILE_READERS = ("open", "torch.load", "pathlib.Path.read_text", "pathlib.Path.read_bytes")
_CAUGHT = frozenset({"KeyError", "OSError", "FileNotFoundError", "IOError", "Exception"})
_KEPT = 20  # of each kind: the warning names the first


def _guarded(script: Script, node: ast.AST, literal: str | None = None) -> bool:
    """Under an `if` that checks for it (a word of _GUARD_WORDS, or the literal itself), or in
    a `try` whose handlers catch a KeyError/OSError (or everything)."""
    for parent in script.ancestors(node):
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)):
            test = ast.unparse(parent.test)
            if any(word in test for word in _GUARD_WORDS) or (literal and literal in test):
                return True
        if isinstance(parent, ast.Try):
            for handler in parent.handlers:
                caught = ast.unparse(handler.type) if handler.type is not None else "Exception"
                if any(name in caught for name in _CAUGHT):
                    return True
    return False


def _constant(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_cuda(value: str | None) -> bool:
    return value is not None and (value == "cuda" or value.startswith("cuda:"))


def _cuda_use(call: Call) -> bool:
    if call.last == "cuda" and not call.node.args:
        return True  # model.cuda(), tensor.cuda()
    if call.name.startswith("torch.cuda.") and call.last in _CUDA_CALLS:
        return True
    if call.last in ("to", "device") and call.node.args and _is_cuda(_constant(call.node.args[0])):
        return True
    return _is_cuda(_constant(call.keyword("device")))


def _backend(call: Call) -> str | None:
    if call.last != "init_process_group":
        return None
    return _constant(call.keyword("backend")) or (
        _constant(call.node.args[0]) if call.node.args else None
    )


def _read_path(call: Call) -> str | None:
    if call.name not in _FILE_READERS:
        return None
    if call.name.startswith("pathlib.Path."):
        inner = call.node.func.value if isinstance(call.node.func, ast.Attribute) else None
        args = inner.args if isinstance(inner, ast.Call) else []
    else:
        args = call.node.args
        mode = _constant(call.keyword("mode")) or (_constant(args[1]) if len(args) > 1 else "r")
        if call.name == "open" and (mode is None or set(mode) & set("wax+")):
            return None  # written: it need not exist
    path = _constant(args[0]) if args else None
    if not path or any(c in path for c in "{}%*?$~") or "\n" in path:
        return None
    return path


def _env_reads(script: Script) -> list[tuple[str, int]]:
    found = []
    for name in ("os", "environ"):
        for node in script.uses.get(name, ()):
            subscript = script.parents.get(node)
            if name == "os":  # os.environ[...]
                if not (isinstance(subscript, ast.Attribute) and subscript.attr == "environ"):
                    continue
                subscript = script.parents.get(subscript)
            elif script.aliases.get("environ") != "os.environ":
                continue
            if not isinstance(subscript, ast.Subscript) or not isinstance(subscript.ctx, ast.Load):
                continue
            key = _constant(subscript.slice)
            if key and not _guarded(script, subscript, key):
                found.append((key, subscript.lineno))
    return sorted(found, key=lambda item: item[1])


def script_uses(script: Script) -> ScriptUses:
    """The script's unconditional uses of CUDA, NCCL, environment variables and files."""
    cuda, nccl, paths = [], [], []
    for call in script.calls:
        line = call.node.lineno
        if _cuda_use(call) and not _guarded(script, call.node):
            cuda.append(line)
        backend = _backend(call)
        if backend and "nccl" in backend and not _guarded(script, call.node):
            nccl.append(line)
        path = _read_path(call)
        if path and not _guarded(script, call.node, path):
            paths.append((path, line))
    return ScriptUses(
        cuda=tuple(cuda[:_KEPT]),
        nccl=tuple(nccl[:_KEPT]),
        env=tuple(_env_reads(script)[:_KEPT]),
        paths=tuple(paths[:_KEPT]),
    )
