"""The entry script compiled before any rank starts: a SyntaxError is found once, here.

Every rank would die on it, each after importing torch; torchrun starts them all
anyway. Compiling costs about a millisecond per thousand lines and never runs the
user's code. A `-m` module is compiled when it can be found without importing
anything (a file under the working directory, which is sys.path[0] for the ranks).
"""

from __future__ import annotations

import os
from pathlib import Path

from safelaunch import exitcodes
from safelaunch.config import LaunchConfig
from safelaunch.errors import PreflightError
from safelaunch.rank.pathentry import is_path_entry


class EntrySyntaxError(PreflightError):
    """The entry script does not compile: python (and every rank) would exit 1."""

    exit_code = exitcodes.SYNTAX


def module_file(module: str, cwd: Path) -> Path | None:
    """The source of `-m module` under the working directory, found without importing."""
    base = cwd.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__main__.py"):
        if candidate.is_file():
            return candidate
    return None


def entry_source(config: LaunchConfig) -> Path | None:
    """The file a rank would run first, when there is one to compile."""
    if config.no_python and not config.run_path:
        return None
    if config.module and not config.run_path:
        return module_file(config.training_script, Path(os.getcwd()))
    script = config.training_script
    if os.path.isdir(script):
        return Path(script, "__main__.py")  # what python runs for a directory
    if is_path_entry(script):
        return None  # a zip file (zipapp): its __main__.py is compiled by zipimport
    return Path(script)


def compile_entry(config: LaunchConfig) -> None:
    """Raise EntrySyntaxError with file:line when the entry script does not compile."""
    path = entry_source(config)
    if path is None:
        return
    try:
        source = path.read_bytes()
    except OSError:
        return  # unreadable: the rank says so itself
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:  # IndentationError and TabError included
        where = f"{exc.filename or path}:{exc.lineno}" if exc.lineno else str(path)
        text = (exc.text or "").strip()
        raise EntrySyntaxError(
            f"{where}: {type(exc).__name__}: {exc.msg}" + (f": {text}" if text else ""),
            "nothing was started; fix the line and launch again",
        ) from None
    except ValueError as exc:  # source with null bytes
        raise EntrySyntaxError(f"{path}: {exc}", "nothing was started") from None
