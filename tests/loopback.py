"""A rendezvous port for launchers on loopback (tests and bench/)."""

from __future__ import annotations

import random
import socket

FIRST = 20000


def free_port() -> int:
    """A port below the kernel's ephemeral range, free when picked.

    Every connection takes its own port from that range: a random pick inside it
    (20000-45000 before) once met a port in use, and torchrun's node 0 failed with "The
    connection to the C10d store has failed" (bench/scale.py, 4 nodes)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            ephemeral = int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    while True:
        port = random.randint(FIRST, max(FIRST + 1000, ephemeral) - 1)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
