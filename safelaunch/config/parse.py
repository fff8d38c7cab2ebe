"""torchrun 2.13's value formats: text from the command line, typed values for LaunchConfig."""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from types import MappingProxyType

from safelaunch import values
from safelaunch.config.launch_config import NprocWord, StreamSelection
from safelaunch.errors import ConfigError
from safelaunch.vocab import word_of

_STD_VALUE = re.compile(r"^[0123]$")
_STD_MAPPING = re.compile(r"^([0-9]:[0123],)*([0-9]:[0123])$")
# rdzv-conf keys that are numbers (torch's names): checked here, not where they are read.
_RDZV_NUMBERS = (
    "join_timeout",
    "last_call_timeout",
    "close_timeout",
    "timeout",
    "read_timeout",
    "keep_alive_interval",
    "keep_alive_max_attempt",
)


def parse_nnodes(text: str) -> tuple[int, int]:
    """`N` or `MIN:MAX` with 0 < MIN <= MAX, as torchrun accepts it."""
    parts = text.split(":")
    try:
        if len(parts) == 1:
            low = high = values.integer("--nnodes", parts[0])
        elif len(parts) == 2:
            low, high = values.integer("--nnodes", parts[0]), values.integer("--nnodes", parts[1])
        else:
            raise ValueError(text)
    except (ValueError, ConfigError):
        raise ConfigError(f"--nnodes={text!r} is not N or MIN:MAX", "e.g. --nnodes=1") from None
    if not 0 < low <= high:
        raise ConfigError(f"--nnodes={text!r} needs 0 < MIN <= MAX", "e.g. --nnodes=1") from None
    values.bounded("--nnodes", high, 1, values.MAX_NODES, "e.g. --nnodes=2")
    return low, high


def parse_nproc(text: str) -> int | NprocWord:
    """An int >= 1, or one of gpu / cpu / auto (resolved by preflight)."""
    value = text.strip().lower()
    word = word_of(value, NprocWord)
    if word is not None:
        return word
    if value == "xpu":
        raise ConfigError("--nproc-per-node=xpu is not supported yet", "give a number of ranks")
    try:
        count = values.integer("--nproc-per-node", value)
    except ConfigError:
        raise ConfigError(
            f"--nproc-per-node={text!r} is not a number of ranks",
            "use an integer, gpu, cpu or auto",
        ) from None
    if count < 1:
        raise ConfigError(f"--nproc-per-node={count} must be at least 1", "e.g. 2")
    values.bounded("--nproc-per-node", count, 1, values.MAX_NPROC, "ranks on one node")
    return count


def parse_streams(flag: str, text: str) -> StreamSelection:
    """torchrun's -r/-t syntax: `0`-`3` for all ranks, or `lr:v,...`."""
    value = text.strip()
    if _STD_VALUE.match(value):
        return StreamSelection(default=int(value))
    if _STD_MAPPING.match(value):
        pairs = dict(item.split(":") for item in value.split(","))
        return StreamSelection(
            per_rank=MappingProxyType({int(k): int(v) for k, v in pairs.items()})
        )
    raise ConfigError(
        f"{flag}={text!r} is not 0-3 or a list like 0:1,1:2",
        "1 = stdout, 2 = stderr, 3 = both (single-digit local ranks, as in torchrun)",
    )


def parse_rank_filter(text: str) -> frozenset[int] | None:
    """--local-ranks-filter: comma-separated local ranks; empty means all."""
    if not text.strip():
        return None
    try:
        ranks = frozenset(values.integer("-", item) for item in text.split(","))
    except ConfigError:
        raise ConfigError(
            f"--local-ranks-filter={text!r} is not a list of local ranks", "e.g. 0,1,2"
        ) from None
    for rank in ranks:
        values.bounded("--local-ranks-filter", rank, 0, values.MAX_NPROC - 1, "e.g. 0,1,2")
    return ranks


def parse_filters(text: str) -> tuple[str, ...]:
    """Comma-separated substrings; `,,` is a literal comma (torchrun's rule)."""
    if not text:
        return ()
    placeholder = "\x00"
    items = text.replace(",,", placeholder).split(",")
    return tuple(item.replace(placeholder, ",") for item in items if item)


def parse_rdzv_conf(text: str) -> Mapping[str, str]:
    """`k=v,k=v` pairs."""
    conf: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--rdzv-conf item {item!r} is not key=value", "e.g. timeout=900")
        conf[key.strip()] = value.strip()
    for key in _RDZV_NUMBERS:
        if key in conf:
            flag = f"--rdzv-conf {key}"
            values.bounded(flag, values.number(flag, conf[key]), 0, values.WEEK_S, "e.g. 900")
    return MappingProxyType(conf)


def parse_signals(text: str) -> tuple[signal.Signals, ...]:
    """Comma-separated signal names (SIGTERM or TERM)."""
    names = [name.strip().upper() for name in text.split(",") if name.strip()]
    signals = []
    for name in names:
        full = name if name.startswith("SIG") else f"SIG{name}"
        try:
            signals.append(signal.Signals[full])
        except KeyError:
            raise ConfigError(
                f"--signals-to-handle: {name!r} is not a signal name", "e.g. SIGTERM,SIGUSR1"
            ) from None
        if signals[-1] in (signal.SIGKILL, signal.SIGSTOP):
            raise ConfigError(f"--signals-to-handle: {full} cannot be caught", "remove it")
    return tuple(signals)
