"""The safety net for a launcher killed by SIGKILL: a forked watcher that sweeps the run.

Ranks die with the launcher (parent-death signal), but their children are
re-parented to init and would live on. The keeper holds the read end of a pipe
whose only write end is the launcher's; EOF without the "done" byte means the
launcher died, and the keeper then ends every process carrying the run's token.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from safelaunch.supervisor.procs import job_processes, signal_pids

_DONE = b"x"
_GRACE = 1.0  # seconds between SIGTERM and SIGKILL once the launcher is gone


class Keeper:
    """Handle on the watcher process; stop() it on every orderly exit."""

    def __init__(self, pid: int, done_fd: int) -> None:
        self.pid = pid
        self._done_fd: int | None = done_fd

    @classmethod
    def start(cls, token: str) -> Keeper:
        """Fork the watcher; call before any thread exists (fork copies only this one)."""
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(write_fd)
                _watch(read_fd, token)
            finally:
                os._exit(0)
        os.close(read_fd)
        return cls(pid, write_fd)

    def stop(self) -> None:
        """Tell the watcher the launcher is ending in order, and wait for it."""
        if self._done_fd is None:
            return
        with contextlib.suppress(OSError):
            os.write(self._done_fd, _DONE)
        os.close(self._done_fd)
        self._done_fd = None
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _watch(read_fd: int, token: str) -> None:
    os.setsid()  # out of the terminal's process group: Ctrl-C is the launcher's to handle
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)  # never hold the user's pipes (`| tee`) open
    os.closerange(3, read_fd)
    os.closerange(read_fd + 1, 65536)
    try:
        message = os.read(read_fd, 1)
    except OSError:
        message = b""
    if message == _DONE:
        return
    _sweep(token)


def _with_token(token: str) -> set[int]:
    return job_processes(token, below=None)


def _sweep(token: str) -> None:
    deadline = time.monotonic() + _GRACE
    signal_pids(_with_token(token), signal.SIGTERM)
    while time.monotonic() < deadline and _with_token(token):
        time.sleep(0.05)
    for _ in range(10):  # repeat: a dying process may still start another
        left = _with_token(token)
        if not left:
            return
        signal_pids(left, signal.SIGKILL)
        time.sleep(0.05)
