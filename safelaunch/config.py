"""LaunchConfig: what the user asked for, validated, frozen.

Value formats follow torchrun 2.13 exactly (shared/reference/torchrun-2.13.md);
everything that would be ignored silently is either refused with a one-line
"not supported yet" or kept as a notice the launcher prints at start.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from safelaunch import values
from safelaunch.errors import ConfigError
from safelaunch.slurm import slurm_defaults
from safelaunch.userfiles import path_problem
from safelaunch.values import text_problem

NPROC_NAMES = ("gpu", "cpu", "auto")
RDZV_BACKENDS = ("static", "c10d", "etcd", "etcd-v2")
START_METHODS = ("spawn", "fork", "forkserver")
EVENT_LOG_HANDLERS = ("null", "console", "dynamic_rendezvous")
NUMA_BINDINGS = ("node", "socket", "exclusive", "core-complex")

# torchrun's Std flags: which of a rank's streams a setting applies to.
STD_NONE, STD_OUT, STD_ERR, STD_ALL = 0, 1, 2, 3

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
# (lowest, highest) of every number option; NaN fails both comparisons.
NUMBER_BOUNDS: dict[str, tuple[float, float]] = {
    "max_restarts": (0, 1000),
    "monitor_interval": (0.001, 3600),
    "node_rank": (0, values.MAX_NODES - 1),
    "shutdown_timeout": (0, values.WEEK_S),
    "hang_timeout": (0, values.WEEK_S),
    "isolate_timeout": (0.001, values.WEEK_S),
}
# Options that name files or are the script's own: any bytes the OS takes, except NUL.
_PATHS = ("training_script", "log_dir", "signatures", "training_script_args")


@dataclass(frozen=True, slots=True)
class StreamSelection:
    """A torchrun -r/-t value: one Std for every local rank, or `lr:std` pairs."""

    default: int = STD_NONE
    per_rank: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))

    def for_rank(self, local_rank: int) -> int:
        """The Std bits that apply to `local_rank`."""
        return self.per_rank.get(local_rank, self.default)


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchConfig:
    """Every launch option, after parsing and validation."""

    training_script: str
    training_script_args: tuple[str, ...] = ()
    nnodes: tuple[int, int] = (1, 1)
    nproc_per_node: int | str = 1
    rdzv_backend: str = "static"
    rdzv_endpoint: str = ""
    rdzv_id: str | None = None
    rdzv_conf: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    standalone: bool = False
    max_restarts: int = 0
    monitor_interval: float = 0.1
    start_method: str = "spawn"
    role: str = "default"
    module: bool = False
    no_python: bool = False
    run_path: bool = False
    log_dir: Path = Path("safelaunch_logs")
    redirects: StreamSelection = field(default_factory=StreamSelection)
    tee: StreamSelection = field(default_factory=StreamSelection)
    local_ranks_filter: frozenset[int] | None = None
    duplicate_stdout_filters: tuple[str, ...] = ()
    duplicate_stderr_filters: tuple[str, ...] = ()
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    signals_to_handle: tuple[signal.Signals, ...] = (
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGHUP,
        signal.SIGQUIT,
    )
    shutdown_timeout: float = 30.0
    virtual_local_rank: bool = False
    color: bool = False
    hang_timeout: float = 300.0  # 0 turns hang detection off
    signatures_file: str | None = None  # the user's own failure signatures (TOML)
    debug_profile: str = "default"  # safelaunch.debugenv.PROFILES
    strict: bool = False  # preflight warnings stop the launch too
    preflight: bool = True  # False: only what must be resolved (rank count, port)
    lint: bool = True  # the static check of the script for DDP mistakes (safelaunch.lint)
    local_addr: str | None = None  # multi-node: the address this node advertises
    origins: tuple[str, ...] = ()  # values taken from SLURM: "nnodes=2 (SLURM_JOB_NUM_NODES)"
    isolate: str = "auto"  # the Gloo rerun after a failure: auto | always | never
    isolate_timeout: float = 600.0  # cap on each isolation rerun, seconds
    isolate_single: bool = False  # also rerun with one rank
    isolate_nccl: bool = False  # also rerun with each NCCL transport disabled in turn
    # The launcher's environment when it started: the base of every rank's env.
    environ: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # Flags accepted but without effect here, said once at start.
    notices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.module and self.no_python and not self.run_path:
            raise ConfigError(
                "--module and --no-python cannot be used together",
                "drop one of them (torchrun refuses this too)",
            )
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts={self.max_restarts} is negative", "use 0 or more")
        if self.monitor_interval <= 0:
            raise ConfigError(
                f"--monitor-interval={self.monitor_interval} must be positive", "try 0.1"
            )
        if self.hang_timeout < 0:
            raise ConfigError(
                f"--hang-timeout={self.hang_timeout} is negative",
                "use seconds, or 0 to turn it off",
            )
        if self.isolate_timeout <= 0:
            raise ConfigError(
                f"--isolate-timeout={self.isolate_timeout} must be positive",
                "use seconds; --isolate never turns the rerun off",
            )
        if self.shutdown_timeout < 0:
            raise ConfigError(
                f"--shutdown-timeout={self.shutdown_timeout} is negative", "use seconds >= 0"
            )
        for name, (low, high) in NUMBER_BOUNDS.items():
            flag = "--" + name.replace("_", "-")
            values.bounded(flag, getattr(self, name), low, high, "see safelaunch --help")
        if self.master_port is not None:
            values.bounded("--master-port", self.master_port, 0, 65535, "a TCP port is 0-65535")


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


def parse_nproc(text: str) -> int | str:
    """An int >= 1, or one of gpu / cpu / auto (resolved by preflight)."""
    value = text.strip().lower()
    if value in NPROC_NAMES:
        return value
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


def _check_multi_node(raw: Mapping[str, Any], nnodes: tuple[int, int]) -> None:
    """What torchrun would refuse, or would only fail on later, for --nnodes > 1."""
    low, high = nnodes
    if raw["standalone"]:
        raise ConfigError(
            f"--standalone with --nnodes={low}:{high}", "--standalone is one node: drop one"
        )
    if raw["rdzv_backend"] == "static":
        if low != high:
            raise ConfigError(
                f"--nnodes={low}:{high} with the static rendezvous",
                "static needs a fixed node count; use --rdzv-backend=c10d for MIN:MAX",
            )
        if not 0 <= raw["node_rank"] < high:
            raise ConfigError(
                f"--node-rank={raw['node_rank']} with --nnodes={high}",
                f"give each node a rank from 0 to {high - 1}",
            )
    elif not raw["rdzv_endpoint"]:
        raise ConfigError(
            f"--rdzv-backend={raw['rdzv_backend']} needs --rdzv-endpoint with --nnodes > 1",
            "e.g. --rdzv-endpoint=node0.example:29400 (the same on every node)",
        )


def unsupported_yet(raw: Mapping[str, Any]) -> tuple[str, ...]:
    """Refuse what would change the job's meaning; return notices for the rest."""
    nnodes = raw["nnodes"]
    multi = nnodes[1] > 1
    if raw["rdzv_backend"] in ("etcd", "etcd-v2"):
        raise ConfigError(
            f"--rdzv-backend={raw['rdzv_backend']} is not supported yet", "use static or c10d"
        )
    if not multi and raw["node_rank"] != 0:
        raise ConfigError(
            f"--node-rank={raw['node_rank']} with one node", "a single-node job has node rank 0"
        )
    if multi:
        _check_multi_node(raw, nnodes)
    notices = []
    if raw["rdzv_endpoint"] and not raw["standalone"] and not multi:
        notices.append(
            f"--rdzv-endpoint={raw['rdzv_endpoint']} is not used: a one-node job needs "
            "no rendezvous store (rank 0 hosts the TCPStore at MASTER_ADDR:MASTER_PORT)"
        )
    if raw["event_log_handler"] not in ("null", None, ""):
        notices.append(f"--event-log-handler={raw['event_log_handler']} is not supported yet")
    if raw["logs_specs"]:
        notices.append(
            f"--logs-specs={raw['logs_specs']} is not supported yet; safelaunch's own "
            "log layout is used"
        )
    if raw["numa_binding"]:
        notices.append(f"--numa-binding={raw['numa_binding']} is not supported yet")
    if raw["local_addr"] and not multi:
        notices.append("--local-addr has no effect on a single node")
    if raw["run_path"] and raw["start_method"] != "spawn":
        notices.append(
            f"--start-method={raw['start_method']}: --run-path always starts a fresh "
            "interpreter per rank here (spawn semantics)"
        )
    return tuple(notices)


def check_text(raw: Mapping[str, Any]) -> None:
    """Every string option: no NUL byte, UTF-8 (paths excepted), paths the kernel takes,
    host names the resolver takes. Before anything uses them."""
    for name, value in raw.items():
        items = value if isinstance(value, tuple) else (value,)
        for item in (i for i in items if isinstance(i, str)):
            problem = text_problem(item) if name not in _PATHS else None
            if name in _PATHS and "\0" in item:
                problem = "contains a NUL byte"
            if problem:
                flag = "a script argument" if name == "training_script_args" else f"--{name}"
                raise ConfigError(f"{flag.replace('_', '-')} {problem}", "fix the value")
    for name in ("log_dir", "signatures", "training_script"):
        problem = path_problem(raw[name]) if raw.get(name) else None
        if problem:
            flag = "the training script" if name == "training_script" else f"--{name}"
            raise ConfigError(f"{flag.replace('_', '-')}: the path {problem}", "use a shorter path")
    for name in ("master_addr", "local_addr"):
        if raw.get(name):
            values.host(f"--{name.replace('_', '-')}", raw[name])
    if raw.get("rdzv_endpoint"):
        values.endpoint("--rdzv-endpoint", raw["rdzv_endpoint"])


def build_config(
    raw: Mapping[str, Any],
    environ: Mapping[str, str],
    explicit: frozenset[str] | None = None,
) -> LaunchConfig:
    """Turn the CLI's raw option values into a validated LaunchConfig.

    `explicit`: the options the user gave (command line, PET_/SAFELAUNCH_ variable,
    --config); inside SLURM the others may come from SLURM's environment.
    """
    values = dict(raw)
    origins: list[str] = []
    if explicit is not None:
        slurm = slurm_defaults(environ)
        alone = bool(raw["standalone"])
        if "nnodes" in slurm and "nnodes" not in explicit and not alone:
            values["nnodes"] = slurm["nnodes"][0]
        # One node (your --nnodes=1, or --standalone): SLURM's node rank and master are
        # not this job's; its GPU count still is.
        several = parse_nnodes(str(values["nnodes"]))[1] > 1 and not alone
        always = {"nproc_per_node"} if alone else {"nproc_per_node", "nnodes"}
        for name, (value, source) in slurm.items():
            if name not in explicit and (name in always or several):
                values[name] = value
                origins.append(f"{name}={value} ({source})")
    raw = values
    check_text(raw)
    values["nnodes"] = parse_nnodes(str(raw["nnodes"]))
    notices = unsupported_yet(values)
    return LaunchConfig(
        training_script=raw["training_script"],
        training_script_args=tuple(raw["training_script_args"]),
        nnodes=values["nnodes"],
        nproc_per_node=parse_nproc(str(raw["nproc_per_node"])),
        rdzv_backend=raw["rdzv_backend"],
        rdzv_endpoint=raw["rdzv_endpoint"],
        rdzv_id=raw["rdzv_id"] or None,
        rdzv_conf=parse_rdzv_conf(raw["rdzv_conf"]),
        standalone=raw["standalone"],
        max_restarts=raw["max_restarts"],
        monitor_interval=raw["monitor_interval"],
        start_method=raw["start_method"],
        role=raw["role"],
        module=raw["module"],
        no_python=raw["no_python"],
        run_path=raw["run_path"],
        log_dir=Path(raw["log_dir"] or "safelaunch_logs"),
        redirects=parse_streams("--redirects", raw["redirects"]),
        tee=parse_streams("--tee", raw["tee"]),
        local_ranks_filter=parse_rank_filter(raw["local_ranks_filter"]),
        duplicate_stdout_filters=parse_filters(raw["duplicate_stdout_filters"]),
        duplicate_stderr_filters=parse_filters(raw["duplicate_stderr_filters"]),
        node_rank=raw["node_rank"],
        master_addr=raw["master_addr"] or None,
        master_port=raw["master_port"],
        signals_to_handle=parse_signals(raw["signals_to_handle"]),
        shutdown_timeout=raw["shutdown_timeout"],
        virtual_local_rank=raw["virtual_local_rank"],
        color=raw.get("color", False),
        hang_timeout=raw.get("hang_timeout", 300.0),
        signatures_file=raw.get("signatures") or None,
        debug_profile=raw.get("debug_profile", "default"),
        strict=raw.get("strict", False),
        preflight=not raw.get("no_preflight", False),
        lint=not raw.get("no_lint", False),
        local_addr=raw["local_addr"] or None,
        origins=tuple(origins),
        isolate=raw.get("isolate", "auto"),
        isolate_timeout=raw.get("isolate_timeout", 600.0),
        isolate_single=raw.get("isolate_single", False),
        isolate_nccl=raw.get("isolate_nccl", False),
        environ=MappingProxyType(dict(environ)),
        notices=notices,
    )
