"""Inside a rank: the local addresses of its own TCP sockets, from /proc.

Gloo's error texts name a peer by address only ("Connection closed by peer
[127.0.0.1]:63645"). Measured with torch 2.13 on loopback, 3 ranks, rank 1 exiting: each
survivor printed the far end of its pair socket to the dead rank, byte-swapped (63645 =
0xF89D for the dead rank's port 40440 = 0x9DF8). The far end is the dead rank's
ephemeral port where it connected to the survivor's listener (both survivors, in that
run) or its listening port where the survivor connected to it. So every TCP socket of
the rank is recorded, listening and connected, after init_process_group and after each
new group connects its pairs; rundir/comm_file.rank_of_address tries both byte orders.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

TABLES = ("/proc/self/net/tcp", "/proc/self/net/tcp6")


def own_inodes() -> set[str]:
    """The inodes of the sockets this process holds open."""
    found: set[str] = set()
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[8:-1])
    return found


def host_of(hex_address: str) -> str:
    """A /proc/net/tcp address (host byte order per 32-bit word) as text: 127.0.0.1, ::1."""
    words = [bytes.fromhex(hex_address[i : i + 8])[::-1] for i in range(0, len(hex_address), 8)]
    raw = b"".join(words)
    if len(raw) == 4:
        return ".".join(str(b) for b in raw)
    if raw[:12] == b"\0" * 10 + b"\xff\xff":  # an IPv4-mapped IPv6 address
        return ".".join(str(b) for b in raw[12:])
    import ipaddress  # rare: only for a real IPv6 address

    return str(ipaddress.IPv6Address(raw))


def local_addresses(lines: Iterable[str], inodes: set[str]) -> list[tuple[str, int]]:
    """(host, port) of each socket in a /proc/net/tcp table whose inode is one of `inodes`."""
    found = []
    for line in lines:
        fields = line.split()
        if len(fields) < 10 or fields[9] not in inodes or ":" not in fields[1]:
            continue
        address, _, port = fields[1].rpartition(":")
        try:
            found.append((host_of(address), int(port, 16)))
        except ValueError:
            continue
    return found


def tcp_addresses() -> list[tuple[str, int]]:
    """Every local (host, port) of this process's TCP sockets; empty where /proc is not."""
    inodes = own_inodes()
    found: list[tuple[str, int]] = []
    if not inodes:
        return found
    for table in TABLES:
        try:
            with open(table) as lines:
                found += local_addresses(lines, inodes)
        except OSError:
            continue
    return sorted(set(found))
