"""The launch's configuration: the LaunchConfig record (record.py), torchrun's value
formats (parse.py), and the way from the command line's raw values to the record
(build.py). Callers import from here."""

from safelaunch.config.build import build_config, check_text, unsupported_yet
from safelaunch.config.launch_config import (
    EVENT_LOG_HANDLERS,
    NPROC_NAMES,
    NUMA_BINDINGS,
    NUMBER_BOUNDS,
    RDZV_BACKENDS,
    START_METHODS,
    STD_ALL,
    STD_ERR,
    STD_NONE,
    STD_OUT,
    LaunchConfig,
    NprocWord,
    RdzvBackend,
    StartMethod,
    StreamSelection,
)
from safelaunch.config.parse import (
    parse_filters,
    parse_nnodes,
    parse_nproc,
    parse_rank_filter,
    parse_rdzv_conf,
    parse_signals,
    parse_streams,
)

__all__ = [
    "EVENT_LOG_HANDLERS",
    "NPROC_NAMES",
    "NUMA_BINDINGS",
    "NUMBER_BOUNDS",
    "RDZV_BACKENDS",
    "START_METHODS",
    "STD_ALL",
    "STD_ERR",
    "STD_NONE",
    "STD_OUT",
    "LaunchConfig",
    "NprocWord",
    "RdzvBackend",
    "StartMethod",
    "StreamSelection",
    "build_config",
    "check_text",
    "parse_filters",
    "parse_nnodes",
    "parse_nproc",
    "parse_rank_filter",
    "parse_rdzv_conf",
    "parse_signals",
    "parse_streams",
    "unsupported_yet",
]
