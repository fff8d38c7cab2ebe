"""The syntax and bounds of every scalar a user can give: numbers, ports, host names, text.

One place, used by the command line, the --config file, PET_* / SAFELAUNCH_* / SLURM
variables alike, so a value means the same wherever it came from. Python's int() and
float() are too lenient for a launcher: they take Unicode digits ("٣"), underscores,
"nan" and "1e400" (inf); each would reach a timeout, a port or the kernel as garbage.
"""

from __future__ import annotations

import ipaddress
import math
import re

from safelaunch.errors import ConfigError

MAX_NPROC = 1024  # ranks on one node: more is a typo (the largest nodes have a few hundred CPUs)
MAX_NODES = 65536
WEEK_S = 7 * 24 * 3600.0  # the longest timeout that makes sense; beyond, C timeouts overflow

_INT = re.compile(r"[+-]?[0-9]{1,18}", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:[0-9]{1,18}(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?", re.ASCII)
_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?", re.ASCII)


def integer(flag: str, text: str) -> int:
    """An ASCII decimal integer (no Unicode digits, no underscores, at most 18 digits)."""
    value = text.strip()
    if not _INT.fullmatch(value):
        raise ConfigError(f"{flag}={text!r} is not a valid integer", "use ASCII digits, e.g. 2")
    return int(value)


def number(flag: str, text: str) -> float:
    """A finite ASCII decimal number (no nan, inf, hex or Unicode digits)."""
    value = text.strip()
    if not _FLOAT.fullmatch(value) or not math.isfinite(float(value)):
        raise ConfigError(f"{flag}={text!r} is not a valid number", "use seconds, e.g. 1.5")
    return float(value)


def bounded(flag: str, value: float, low: float, high: float, fix: str) -> None:
    """Refuse a number outside [low, high]; NaN fails every comparison, so it is refused too."""
    if not low <= value <= high:
        raise ConfigError(f"{flag}={value:g} is out of range ({low:g} to {high:g})", fix)


def port(flag: str, text: str) -> int:
    """A TCP port, 0-65535."""
    value = integer(flag, text)
    bounded(flag, value, 0, 65535, "a TCP port is 0-65535")
    return value


def text_problem(text: str) -> str | None:
    """Why a string cannot be handed to a rank or a resolver (None when it can)."""
    if "\0" in text:
        return "contains a NUL byte"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    return None


def host(flag: str, text: str) -> str:
    """An IP address or a host name the resolver accepts (RFC 1123 labels, IDNA)."""
    value = text.strip()
    try:
        ipaddress.ip_address(value.strip("[]"))
        return value
    except ValueError:
        pass
    why = text_problem(value)
    try:
        ascii_name = value.encode("idna").decode("ascii") if why is None else ""
    except UnicodeError:  # the codec refuses empty or over-long labels, bad characters
        ascii_name = ""
    labels = ascii_name.rstrip(".").split(".")
    if why is None and (
        not ascii_name or len(ascii_name) > 253 or not all(_LABEL.fullmatch(p) for p in labels)
    ):
        why = "is not a host name or IP address"
    if why is not None:
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise ConfigError(f"{flag}={shown!r} {why}", "e.g. node0.example.com or 10.0.0.1")
    return value


def endpoint(flag: str, text: str) -> tuple[str, int | None]:
    """`host`, `host:port` or `[v6]:port`."""
    value = text.strip()
    if value.startswith("["):
        address, _, rest = value[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else None
        if rest and port_text is None:
            raise ConfigError(f"{flag}={text!r} is not host[:port]", "e.g. [::1]:29400")
    elif value.count(":") == 1:
        address, port_text = value.split(":")
    else:
        address, port_text = value, None
    host(flag, address)
    return address, port(flag, port_text) if port_text is not None else None
