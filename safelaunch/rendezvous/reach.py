"""Can this node reach the rendezvous store? Said within seconds, with what was tried.

torch's rendezvous client retries its connection silently until its timeout (c10d:
`read_timeout`, 60 s; static: `join_timeout`, 600 s), so a wrong address, a wrong
interface or a firewall looked like a slow peer for minutes. Beside it, a thread
tries a plain TCP connection to the endpoint every second and, after SAY_AFTER
seconds without an answer, says what it tried (each address, the port, the error).

It only says; it never fails the launch: a peer that starts later than this node is
normal, and torch's own timeout stays the one bound. Only a node that does not host
the store probes (node 0 of a static rendezvous, or the c10d node whose address is the
endpoint, serves it itself and would only find its own store not up yet).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import threading
import time
from collections.abc import Callable

from safelaunch import defaults
from safelaunch.config import LaunchConfig, RdzvBackend

PROBE_EVERY = 1.0  # seconds between connection attempts
SAY_AFTER = 3.0  # seconds without an answer before this node says so
CONNECT_TIMEOUT = 2.0  # a firewall that drops packets answers with nothing at all


STATIC_PORT = 29500  # torchrun's --master-port default
C10D_PORT = 29400  # torch's default c10d endpoint port


def probe_target(config: LaunchConfig) -> tuple[str, int, str] | None:
    """(host, port, until when torch retries) of the store, for a node that does not host it.

    None for a node that hosts it or may: its own store not up yet proves nothing.
    """
    conf = config.rdzv_conf
    if config.rdzv_backend == RdzvBackend.STATIC:
        if config.node_rank == 0:
            return None
        timeout = conf.get("timeout", conf.get("join_timeout", str(defaults.JOIN_TIMEOUT_S)))
        host = config.master_addr or "127.0.0.1"
        return host, config.master_port or STATIC_PORT, f"join_timeout ({timeout} s)"
    host, _, port = (config.rdzv_endpoint or "").strip().rpartition(":")
    if not host or not port.isdigit():
        host, port = (config.rdzv_endpoint or "").strip().strip("[]"), str(C10D_PORT)
    host = host.strip("[]")
    is_host = conf.get("is_host")
    hosts = names_this_machine(host) if is_host is None else is_host.strip().lower() in _TRUE
    if hosts or not host:
        return None
    return host, int(port), f"read_timeout ({conf.get('read_timeout', '60')} s)"


_TRUE = ("1", "true", "t", "yes", "y")


def names_this_machine(host: str) -> bool:
    """torch's c10d test of whether this node hosts the store (`_matches_machine_hostname`).

    Redone here without torch: the probe starts before torch's import, which takes
    seconds on a loaded node.
    """
    if host == "localhost":
        return True
    try:
        if ipaddress.ip_address(host).is_loopback:
            return True
    except ValueError:
        pass
    this_host = socket.gethostname()
    if host == this_host:
        return True
    try:
        theirs = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
        ours = socket.getaddrinfo(
            this_host, None, proto=socket.IPPROTO_TCP, flags=socket.AI_CANONNAME
        )
    except (OSError, ValueError):
        return False
    return any(info[3] == host or info[4][0] in theirs for info in ours)


def try_connect(host: str, port: int, timeout: float) -> tuple[bool, list[str]]:
    """(an address answered, what each address said): `127.0.0.1: connection refused`."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return False, [f"{host}: cannot resolve ({exc.strerror})"]
    tried: list[str] = []
    for family, kind, proto, _, address in infos:
        if any(line.startswith(f"{address[0]}:") for line in tried):
            continue
        with socket.socket(family, kind, proto) as probe:
            probe.settimeout(timeout)
            try:
                probe.connect(address)
            except OSError as exc:
                tried.append(f"{address[0]}: {_why(exc)}")
                continue
        return True, tried
    return False, tried


def _why(exc: OSError) -> str:
    if isinstance(exc, TimeoutError) or exc.errno == errno.ETIMEDOUT:
        return "no answer (timed out: a firewall dropping packets, or no such host)"
    if exc.errno == errno.ECONNREFUSED:
        return "connection refused (nothing listens on that port there yet)"
    return exc.strerror or type(exc).__name__


class ReachProbe(threading.Thread):
    """Tries the endpoint until it answers or stop(); says so once when it does not."""

    def __init__(
        self, host: str, port: int, gives_up_after: str, say: Callable[[str], None]
    ) -> None:
        super().__init__(name="safelaunch-reach", daemon=True)
        self._host, self._port = host, port
        self._gives_up_after = gives_up_after
        self._say = say
        self._stopped = threading.Event()
        self.said: str | None = None  # the line said, if one was

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        started = time.monotonic()
        tries = 0
        while not self._stopped.is_set():
            answered, tried = try_connect(self._host, self._port, CONNECT_TIMEOUT)
            tries += 1
            waited = time.monotonic() - started
            if answered:
                if self.said is not None:
                    self._say(f"rendezvous: reached {self._host}:{self._port} after {waited:.0f} s")
                return
            if self.said is None and waited >= SAY_AFTER:
                self.said = (
                    f"rendezvous: cannot reach {self._host}:{self._port} yet ({tries} tries in "
                    f"{waited:.0f} s; {'; '.join(tried)}); torch keeps trying until "
                    f"{self._gives_up_after}. A node that starts later is normal; if the node "
                    "hosting the store runs already, check the address, the port, the network "
                    "interface (--local-addr) and the firewall"
                )
                self._say(self.said)
            self._stopped.wait(PROBE_EVERY)
