"""Starting one rank: its own session, pipes for its output, death with the launcher."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from safelaunch.config import STD_ALL, STD_ERR, STD_OUT
from safelaunch.plan import WorkerSpec
from safelaunch.supervisor.procs import die_with


@dataclass(slots=True)
class StartedRank:
    """A running rank and the read ends of its output pipes (fd -> stream)."""

    spec: WorkerSpec
    process: subprocess.Popen[bytes]
    pipes: dict[int, int]


def start_rank(spec: WorkerSpec, split_streams: bool) -> StartedRank:
    """Spawn the rank; raises OSError when its command cannot be executed."""
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe() if split_streams else (None, out_write)
    try:
        # Its own session: signals to the launcher's terminal group do not hit
        # it directly, and killpg() reaches the rank and the children it made.
        # Python ranks arm their parent-death signal in the bootstrap; a hook here
        # would turn every spawn into a full fork of the launcher.
        process = subprocess.Popen(
            list(spec.argv),
            env=dict(spec.env),
            stdout=out_write,
            stderr=err_write,
            start_new_session=True,
            preexec_fn=None if spec.bootstrapped else die_with(os.getpid()),
        )
    except OSError:
        for fd in (out_read, err_read):
            if fd is not None:
                os.close(fd)
        raise
    finally:
        os.close(out_write)
        if err_write != out_write:
            os.close(err_write)
    pipes = {out_read: STD_OUT if split_streams else STD_ALL}
    if err_read is not None:
        pipes[err_read] = STD_ERR
    return StartedRank(spec=spec, process=process, pipes=pipes)
