"""Where the launcher bends the interpreter for launch cost: the one place it does.

Each bend was measured (docs/launch-cost.md has the figures and what was dropped); the
code inside a rank has its own, in safelaunch/rank/stdlib_standins.py (it may import
nothing of the launcher's). Only `safelaunch` and `python -m safelaunch` come through
here (safelaunch/entry.py): tests that call the commands in-process never pause the
collector nor skip the exit.

- The cyclic collector is paused while the CLI and the launch path import (creating
  their dataclasses set off ~35 young and ~3 middle collections, ~6 ms of a 4-rank
  launch's CPU, that found little) and while a script is parsed or the judging modules
  import; reference counting still frees everything.
- A library that stays loaded, torch for a multi-node rendezvous, imports with the
  collector paused and is frozen afterwards (`paused(keep=True)`).
- The interpreter's own exit (module teardown, a full collection: 17-18 ms of every
  launch) is skipped once the code is decided and nothing is left for it to do.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import TracebackType


_bent = False  # pause_collector ran: the commands run as `safelaunch`, not in-process


def pause_collector() -> None:
    """No collection until settled(): a launch or a subcommand calls it after its imports."""
    global _bent
    _bent = True
    gc.disable()


def settled() -> None:
    """The imports are done: collect again, from here on, what the launcher makes later.

    gc.freeze first moves what the imports made out of every later collection: without
    it the first full collection after the pause walks all of it (~11 ms of a launch's
    CPU, measured with cProfile inside `launch`). Where something else runs the commands
    (tests, in-process) the collector was never paused and this leaves it alone.
    """
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


class paused:
    """No collection inside; the collector's previous state (on or off) afterwards.

    A class rather than contextlib.contextmanager: entry.py imports this module before
    the CLI's Ctrl-C guard is up, and contextlib would lengthen that window.

    `keep`: inside, a library that stays loaded to the end imports (torch, for a
    multi-node rendezvous), and what it made is frozen afterwards. torch's rendezvous
    modules make ~270,000 tracked objects: the collections during their import find
    little (~60 ms of its ~1.05 s of CPU) and every full collection after it walks them
    all (~50 ms each); frozen, they are out of both (docs/launch-cost.md). Only where
    entry.py bent the interpreter: run in-process (tests), that is a plain import.
    """

    def __init__(self, *, keep: bool = False) -> None:
        self._keep = keep

    def __enter__(self) -> None:
        self._enabled = gc.isenabled()
        self._bend = not self._keep or (_bent and self._enabled)
        if self._bend:
            gc.disable()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._bend and self._keep:
            gc.freeze()
        if self._bend and self._enabled:
            gc.enable()


def leave(done: SystemExit, threads: int) -> None:
    """Exit with the decided code without finalizing the interpreter, when that is safe.

    By now the launch's `finally` has stopped the keeper, released the port lock and
    removed the private directory, and every file the launcher writes was written with
    os.write or closed by a `with`. What finalization would still do: run atexit handlers,
    join non-daemon threads, flush sys.stdout/sys.stderr, tear the modules down. The
    handlers run here, as the exit would run them; the teardown is what is skipped (with
    torch loaded for a multi-node rendezvous, it took 1-3.5 s on a busy node). So: only
    with no non-daemon thread but this one (`threads`: how many run); after flushing both
    streams ourselves; and never for a code that is not a number (sys.exit("text") prints
    it) nor when a flush fails (then the interpreter's own exit reports it as before).
    """
    code = 0 if done.code is None else done.code
    if not isinstance(code, int) or threads > 1:
        raise done
    atexit._run_exitfuncs()  # in registration order reversed, errors printed, as at exit
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None: started with it closed
                stream.flush()
    except (OSError, ValueError):
        raise done from None
    os._exit(code & 0xFF)  # what the kernel keeps of sys.exit's code too
