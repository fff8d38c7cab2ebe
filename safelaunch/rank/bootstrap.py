"""Runs the user's script or module exactly as `python script.py` / `python -m mod` would,
with faulthandler and the heartbeat sender installed first.

Started as `python -u -c "<import and call main()>" MODE TARGET ARGS...`: with -c the
real `__main__` module holds nothing of ours, so the script runs in it as it would
under plain python (pickling of classes defined there, multiprocessing spawn, ...).
Differences that cannot be avoided: sys.orig_argv, and the bootstrap's own frames,
which are removed from uncaught tracebacks.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import sys

# importlib.machinery's SourceFileLoader is this module's (frozen, loaded at startup);
# importing importlib.machinery costs every rank ~0.8 ms for the one name
from _frozen_importlib_external import SourceFileLoader

from safelaunch.rank import beat, dist_hooks, flight_recorder, names, pathentry
from safelaunch.rank.stdlib_standins import signals, suppress

TYPE_CHECKING = False  # `types` costs every rank at start; only the checker needs it
if TYPE_CHECKING:
    from types import FrameType, TracebackType
    from typing import NoReturn

_stacks_file = None  # kept open for faulthandler, for the life of the process


def die_with_launcher() -> None:
    """SIGKILL this rank if the launcher dies, even by SIGKILL (Linux parent-death signal).

    Set here rather than between fork and exec: a launcher hook there costs it a full
    fork per rank (~3.5 ms each, serial) instead of a vfork.
    """
    launcher = os.environ.get(names.LAUNCHER_PID)
    if not launcher:
        return
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signals.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        return  # the launcher's watcher still sweeps the run
    if os.getppid() != int(launcher):  # it died before the signal was armed
        os._exit(1)


def install_faulthandler() -> None:
    """Native crashes print the Python stack to the rank's log; a signal dumps all threads."""
    global _stacks_file
    faulthandler.enable(file=sys.stderr, all_threads=True)
    signum = os.environ.get(names.DUMP_SIGNAL)
    path = os.environ.get(names.STACKS_FILE)
    if signum and path:
        try:
            _stacks_file = open(path, "a")  # noqa: SIM115 - must outlive this function
            # chained to the flight recorder's trigger when armed (else SIG_DFL: it would kill)
            faulthandler.register(
                int(signum), file=_stacks_file, all_threads=True, chain=flight_recorder.armed()
            )
            os.register_at_fork(after_in_child=_dump_on_its_own)
        except Exception:
            pass  # the job runs without on-demand stacks rather than not at all


def _dump_on_its_own() -> None:
    """In a process forked from the rank (a DataLoader worker): the dump signal writes its
    stacks into a file of its own (named by its pid), so that the launcher knows whose
    stack it reads, and not the flight record (the rank's; its dump thread is not here)."""
    global _stacks_file
    signum = os.environ.get(names.DUMP_SIGNAL)
    path = os.environ.get(names.STACKS_FILE)
    if not signum or not path:
        return
    try:
        from safelaunch.rundir import stack_files  # only in a forked child: ranks pay nothing

        _stacks_file = open(stack_files.forked_dump_file(path, os.getpid()), "a")  # noqa: SIM115
        faulthandler.register(int(signum), file=_stacks_file, all_threads=True, chain=False)
    except Exception:
        pass  # the child keeps the rank's handler: its dump goes to the rank's file


def start_heartbeat() -> None:
    """Start the sender when the launcher asked for one."""
    directory = os.environ.get(names.HEARTBEAT_DIR)
    if directory:
        try:
            interval = float(os.environ.get(names.HEARTBEAT_INTERVAL, "1"))
            beat.start(os.environ.get("RANK", "0"), directory, interval)
        except Exception:
            pass  # without a heartbeat the launcher falls back to output silence


def run_script(script: str, args: list[str]) -> None:
    """`python script.py args` in the real __main__ module (a directory or zip file with a
    `__main__.py` runs as python runs it: rank/pathentry.py)."""
    path = os.path.abspath(script)
    sys.argv[:] = [script, *args]
    data = None if os.path.isdir(path) else _read(path)
    if data is None or pathentry.is_path_entry(path, data):  # a directory: python's error too
        import runpy

        sys.path[0] = path  # as python sets it for `python appdir` / `python app.pyz`
        runpy._run_module_as_main("__main__", alter_argv=False)  # type: ignore[attr-defined]
        return
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    code = compile(data, path, "exec", dont_inherit=True)
    main_globals = sys.modules["__main__"].__dict__
    main_globals.update(
        __file__=path,
        __cached__=None,
        __spec__=None,
        __package__=None,
        __doc__=None,
        __loader__=SourceFileLoader("__main__", path),
    )
    exec(code, main_globals)


def _read(path: str) -> bytes:
    with open(path, "rb") as source:
        return source.read()


def run_module(module: str, args: list[str]) -> None:
    """`python -m module args`, through the same runpy entry point python uses."""
    import runpy

    sys.argv[:] = [module, *args]
    sys.path[0] = os.getcwd()
    runpy._run_module_as_main(module, alter_argv=True)  # type: ignore[attr-defined]


def record_exit(
    how: str, code: object, tb: TracebackType | None, only_if_lingering: bool = False
) -> None:
    """Write `rank<N>.exit.json` beside the heartbeat record: how, where and when it left.

    A rank that leaves while its peers still communicate is the root cause (with a code
    of 0: it left early; with a code of its own: it failed); the survivors only show
    "Connection closed by peer". Its exit status alone cannot say where it left; the
    SystemExit's traceback can. The non-daemon threads still alive are kept too: they
    keep the process alive after the script ended (`only_if_lingering`: write the
    record only when there are some).
    """
    threads = beat.lingering_threads()
    if only_if_lingering and not threads:
        return
    frames: list[tuple[str, int, str]] = []
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno, tb.tb_frame.f_code.co_name))
        tb = tb.tb_next
    beat.write_exit(how, code, frames[::-1], threads)  # innermost first


def record_hard_exits() -> None:
    """os._exit ends the process at once: no exception, no atexit, so no exit record, and
    a rank that ended so while its peers waited left no line to read. Wrapped to write
    the record first, in the rank's own process only (a forked DataLoader worker ends by
    os._exit too, and the rank's record is not its to write)."""
    real = os._exit
    rank_pid = os.getpid()

    def _exit(status: int) -> NoReturn:
        if os.getpid() == rank_pid:
            with suppress(Exception):
                frames = []
                frame: FrameType | None = sys._getframe(1)
                while frame is not None:  # innermost first, as write_exit takes them
                    frames.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
                    frame = frame.f_back
                beat.write_exit("os._exit", status, frames, beat.lingering_threads())
        real(status)

    os._exit = _exit


def _user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """Drop the bootstrap's frames from the top of a traceback."""
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


def main() -> None:
    """Entry point inside the rank."""
    mode, target, *args = sys.argv[1:]
    die_with_launcher()
    flight_recorder.arm()  # before faulthandler takes the signal, so that it can chain to it
    install_faulthandler()
    start_heartbeat()
    record_hard_exits()
    try:
        dist_hooks.install()
    except Exception as exc:  # the job runs as launched rather than not at all
        print(f"safelaunch: backend override not installed: {exc!r}", file=sys.stderr)
    try:
        if mode == "module":
            run_module(target, args)
        else:
            run_script(target, args)
    except SystemExit as exc:
        record_exit("sys.exit", exc.code, exc.__traceback__)
        raise  # python's own handling: the code, or the message, no traceback
    except BaseException as exc:  # what python does with an uncaught exception
        # Set on the exception too: torch's wrapped excepthook formats exc.__traceback__.
        exc.with_traceback(_user_traceback(exc.__traceback__))
        flight_recorder.dump("exception")  # a survivor of a peer's failure: what it was waiting for
        record_exit("raised", 1, exc.__traceback__, only_if_lingering=True)  # threads keep it alive
        sys.excepthook(type(exc), exc, exc.__traceback__)
        if isinstance(exc, KeyboardInterrupt):
            # python >= 3.8 ends by SIGINT itself, so the parent sees death by signal
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            signals.signal(signals.SIGINT, signals.SIG_DFL)
            os.kill(os.getpid(), signals.SIGINT)
        raise SystemExit(1) from None
    record_exit("returned", 0, None)
