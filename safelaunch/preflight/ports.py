"""MASTER_PORT reservation that two jobs started at the same instant cannot share.

The kernel picks a free port (bind to port 0); a lock file named after the port,
held for the whole run, stops a second safelaunch job from taking the same port
in the window between our probe closing and rank 0's TCPStore binding it.

The lock is flock(2) taken directly (what filelock does on Linux): importing
filelock costs ~20 ms, a tenth of the launch-overhead budget. The kernel drops
the lock when the launcher dies, however it dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Per user, mode 0700, never chmod'ed: a shared 1777 directory let another user plant
# links where our lock files are created (or have us chmod their target). Two users'
# jobs then only have the kernel's choice of port between them, as torchrun has.
LOCK_DIR = Path(tempfile.gettempdir()) / f"safelaunch-ports-{os.geteuid()}"
_ATTEMPTS = 64


@dataclass(slots=True)
class PortReservation:
    """A port this run owns among safelaunch jobs on this host, until release()."""

    port: int
    lock_fd: int | None

    def release(self) -> None:
        """Let other safelaunch jobs use the port again."""
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # closing the descriptor drops the flock
            self.lock_fd = None


class PortInUse(Exception):
    """The requested port is taken; the message says by whom."""


def _lock_for(port: int) -> tuple[bool, int | None]:
    """Take the port's lock without waiting: (False, None) when another job holds it.

    Without a usable lock directory the answer is (True, None): the kernel's
    choice alone then guards the port, as it does for torchrun.
    """
    try:
        with contextlib.suppress(FileExistsError):
            LOCK_DIR.mkdir(mode=0o700)
        info = os.lstat(LOCK_DIR)  # ours, a real directory, private: else not used at all
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            return True, None
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(LOCK_DIR / f"{port}.lock", flags, 0o600)
    except OSError:
        return True, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False, None
    return True, fd


def _bindable(port: int) -> bool:
    """True when nothing listens on `port` (IPv4 and, where present, IPv6 wildcard)."""
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this host
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((addr, port))
            except OSError:
                return False
    return True


def _kernel_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def reserve_free_port() -> PortReservation:
    """A free port that no other safelaunch job on this host holds."""
    for _ in range(_ATTEMPTS):
        port = _kernel_free_port()
        taken, lock = _lock_for(port)
        if not taken:
            continue
        reservation = PortReservation(port, lock)
        if _bindable(port):
            return reservation
        reservation.release()
    raise PortInUse(f"no free port found after {_ATTEMPTS} tries")


def reserve_port(port: int) -> PortReservation:
    """Reserve the user's explicit port, or say why it cannot be used."""
    taken, lock = _lock_for(port)
    if not taken:
        raise PortInUse(f"port {port} is held by another safelaunch job on this host")
    reservation = PortReservation(port, lock)
    if not _bindable(port):
        reservation.release()
        raise PortInUse(f"port {port} is already in use on this host")
    return reservation
