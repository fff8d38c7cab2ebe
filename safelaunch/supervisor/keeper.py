"""The safety net for a launcher killed by SIGKILL: a forked watcher that sweeps the run.

Ranks die with the launcher (parent-death signal), but their children are
re-parented to init and would live on. The keeper holds the read end of a pipe
whose only write end is the launcher's; EOF without the "done" byte means the
launcher died, and the keeper then ends every process of the run.

"Of the run" by what a process cannot shed: the run's token in its environment is
lost to `env -i`, a session to setsid, but while the launcher lives every descendant
is in its tree (it is a subreaper: orphans come back to it). So the keeper records
that tree every RECORD_INTERVAL seconds (pid, session, start time; proctree.py reads
only the tree's processes and new ones after its first pass), and the sweep
takes the token's processes, the recorded ones still alive (same start time: not a
reused pid), everything in a session a recorded process led, and their descendants.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import time
from collections.abc import Callable

from safelaunch.proctree import TreeScan
from safelaunch.supervisor.procs import (
    ProcessIdentity,
    identity,
    job_processes,
    left_behind,
    signal_pids,
    still,
)

_DONE = b"x"
_GRACE = 1.0  # seconds between SIGTERM and SIGKILL once the launcher is gone
RECORD_INTERVAL = 0.5  # a /proc pass (a few ms); a process started and detached (env -i
# and setsid) in the last interval before a SIGKILL can still escape


class Keeper:
    """Handle on the watcher process; stop() it on every orderly exit."""

    def __init__(self, pid: int, done_fd: int) -> None:
        self.pid = pid
        self._done_fd: int | None = done_fd

    @classmethod
    def start(cls, token: str, private_dir: str | None = None) -> Keeper:
        """Fork the watcher; call before any thread exists (fork copies only this one).

        `private_dir` (heartbeats, stack dumps) is removed after a sweep: a SIGKILLed
        launcher cannot remove it itself."""
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(write_fd)
                _watch(read_fd, token)
                if private_dir is not None:
                    shutil.rmtree(private_dir, ignore_errors=True)
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
    launcher = os.getppid()
    outside = {os.getsid(0)}  # the user's session (the launcher's): never swept by session
    os.setsid()  # out of the terminal's process group: Ctrl-C is the launcher's to handle
    outside.add(os.getsid(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the launcher's early handler: die of it
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)  # never hold the user's pipes (`| tee`) open
    os.closerange(3, read_fd)
    os.closerange(read_fd + 1, 65536)
    recorded: dict[int, ProcessIdentity] = {}
    scan = TreeScan(identity)  # after its first pass, reads only the tree and new processes
    while not select.select([read_fd], [], [], RECORD_INTERVAL)[0]:
        recorded = _record(recorded, launcher, scan)
    try:
        message = os.read(read_fd, 1)
    except OSError:
        message = b""
    if message == _DONE:
        os._exit(0)  # an orderly end: the launcher removes its own directory
    sessions = {seen.session for seen in recorded.values()} - outside
    _sweep(lambda: job_processes(token, below=None) | left_behind(recorded, sessions))


def _record(
    recorded: dict[int, ProcessIdentity], launcher: int, scan: TreeScan[ProcessIdentity]
) -> dict[int, ProcessIdentity]:
    """The launcher's tree now, plus what was recorded before and still runs (it may have
    left the tree only as the launcher died)."""
    tree = scan.scan([launcher], time.monotonic())
    now = {pid: seen for pid, (_, seen) in tree.items() if pid != launcher}
    for pid, seen in recorded.items():
        if pid not in now and still(pid, seen):
            now[pid] = seen
    return now


def _sweep(found: Callable[[], set[int]]) -> None:
    deadline = time.monotonic() + _GRACE
    signal_pids(found(), signal.SIGTERM)
    while time.monotonic() < deadline and found():
        time.sleep(0.05)
    for _ in range(10):  # repeat: a dying process may still start another
        left = found()
        if not left:
            return
        signal_pids(left, signal.SIGKILL)
        time.sleep(0.05)
