"""LaunchConfig: what the user asked for, validated, frozen.

Value formats follow torchrun 2.13 exactly (shared/reference/torchrun-2.13.md): their
parsers are config/parse.py's; config/build.py turns the CLI's raw values into this
record. The defaults are safelaunch/defaults.py's.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from safelaunch import defaults, values
from safelaunch.debugenv import DebugProfile
from safelaunch.errors import ConfigError
from safelaunch.vocab import StrEnum, Switch


class NprocWord(StrEnum):
    """--nproc-per-node given as a word: one rank per visible GPU, per CPU, or either."""

    GPU = "gpu"
    CPU = "cpu"
    AUTO = "auto"


class RdzvBackend(StrEnum):
    STATIC = "static"
    C10D = "c10d"
    ETCD = "etcd"
    ETCD_V2 = "etcd-v2"


class StartMethod(StrEnum):
    SPAWN = "spawn"
    FORK = "fork"
    FORKSERVER = "forkserver"


# The parser's choices: plain words (its messages show them with repr).
NPROC_NAMES = tuple(word.value for word in NprocWord)
RDZV_BACKENDS = tuple(backend.value for backend in RdzvBackend)
START_METHODS = tuple(method.value for method in StartMethod)
EVENT_LOG_HANDLERS = ("null", "console", "dynamic_rendezvous")
NUMA_BINDINGS = ("node", "socket", "exclusive", "core-complex")
_ISOLATE = Switch(defaults.ISOLATE)
_RESTART_POLICY = Switch(defaults.RESTART_POLICY)
_DEBUG_PROFILE = DebugProfile(defaults.DEBUG_PROFILE)
_RDZV_BACKEND = RdzvBackend(defaults.RDZV_BACKEND)
_START_METHOD = StartMethod(defaults.START_METHOD)

# torchrun's Std flags: which of a rank's streams a setting applies to.
STD_NONE, STD_OUT, STD_ERR, STD_ALL = 0, 1, 2, 3

# (lowest, highest) of every number option; NaN fails both comparisons.
NUMBER_BOUNDS: dict[str, tuple[float, float]] = {
    "max_restarts": (0, 1000),
    "monitor_interval": (0.001, 3600),
    "node_rank": (0, values.MAX_NODES - 1),
    "shutdown_timeout": (0, values.WEEK_S),
    "hang_timeout": (0, values.WEEK_S),
    "isolate_timeout": (0.001, values.WEEK_S),
    "on_verdict_timeout": (0.001, values.WEEK_S),
    "metrics_port": (0, 65535),
}


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
    nnodes: tuple[int, int] = defaults.NNODES
    nproc_per_node: int | NprocWord = defaults.NPROC_PER_NODE
    rdzv_backend: RdzvBackend = _RDZV_BACKEND
    rdzv_endpoint: str = ""
    rdzv_id: str | None = None
    rdzv_conf: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    standalone: bool = False
    max_restarts: int = defaults.MAX_RESTARTS
    restart_policy: Switch = _RESTART_POLICY  # which failures restart (safelaunch.restarts)
    monitor_interval: float = defaults.MONITOR_INTERVAL_S
    start_method: StartMethod = _START_METHOD
    role: str = defaults.ROLE
    module: bool = False
    no_python: bool = False
    run_path: bool = False
    log_dir: Path = Path(defaults.LOG_DIR)
    redirects: StreamSelection = field(default_factory=StreamSelection)
    tee: StreamSelection = field(default_factory=StreamSelection)
    local_ranks_filter: frozenset[int] | None = None
    duplicate_stdout_filters: tuple[str, ...] = ()
    duplicate_stderr_filters: tuple[str, ...] = ()
    node_rank: int = defaults.NODE_RANK
    master_addr: str | None = None
    master_port: int | None = None
    signals_to_handle: tuple[signal.Signals, ...] = defaults.SIGNALS_TO_HANDLE
    shutdown_timeout: float = defaults.SHUTDOWN_TIMEOUT_S
    virtual_local_rank: bool = False
    color: bool = False
    hang_timeout: float = defaults.HANG_TIMEOUT_S  # 0 turns hang detection off
    # --hang-timeout auto (the default): learned from the job's rhythm, hang_timeout
    # holding until it is known; False: the user gave a number, which wins
    hang_auto: bool = True
    signatures_file: str | None = None  # the user's own failure signatures (TOML)
    debug_profile: DebugProfile = _DEBUG_PROFILE  # safelaunch.debugenv.PROFILES
    strict: bool = False  # preflight warnings stop the launch too
    preflight: bool = True  # False: only what must be resolved (rank count, port)
    lint: bool = True  # the static check of the script for DDP mistakes (safelaunch.lint)
    local_addr: str | None = None  # multi-node: the address this node advertises
    origins: tuple[str, ...] = ()  # values taken from SLURM: "nnodes=2 (SLURM_JOB_NUM_NODES)"
    slurm_unread: tuple[str, ...] = ()  # SLURM variables that could not be read: warnings
    isolate: Switch = _ISOLATE  # the Gloo rerun after a failure
    isolate_timeout: float = defaults.ISOLATE_TIMEOUT_S  # cap on each isolation rerun, seconds
    isolate_single: bool = False  # also rerun with one rank
    isolate_nccl: bool = False  # also rerun with each NCCL transport disabled in turn
    on_verdict: str | None = None  # the user's command, run at each verdict (on_verdict.py)
    on_verdict_timeout: float = defaults.ON_VERDICT_TIMEOUT_S
    metrics_port: int = defaults.METRICS_PORT  # 0: no OpenMetrics endpoint
    metrics_addr: str = defaults.METRICS_ADDR
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
