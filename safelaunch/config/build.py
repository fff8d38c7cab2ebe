"""From the CLI's raw option values (and SLURM's environment) to a validated LaunchConfig.

Everything that would be ignored silently is either refused with a one-line
"not supported yet" or kept as a notice the launcher prints at start.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from safelaunch import defaults, values
from safelaunch.config.launch_config import LaunchConfig, RdzvBackend, StartMethod
from safelaunch.config.parse import (
    parse_filters,
    parse_nnodes,
    parse_nproc,
    parse_rank_filter,
    parse_rdzv_conf,
    parse_signals,
    parse_streams,
)
from safelaunch.debugenv import DebugProfile
from safelaunch.errors import ConfigError
from safelaunch.slurm import slurm_defaults, slurm_unread
from safelaunch.userfiles import path_problem
from safelaunch.values import text_problem
from safelaunch.vocab import Switch

# Options that name files or are the script's own: any bytes the OS takes, except NUL.
_PATHS = ("training_script", "log_dir", "signatures", "training_script_args")


def _check_multi_node(raw: Mapping[str, Any], nnodes: tuple[int, int]) -> None:
    """What torchrun would refuse, or would only fail on later, for --nnodes > 1."""
    low, high = nnodes
    if raw["standalone"]:
        raise ConfigError(
            f"--standalone with --nnodes={low}:{high}", "--standalone is one node: drop one"
        )
    if raw["rdzv_backend"] == RdzvBackend.STATIC:
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
    if raw["rdzv_backend"] in (RdzvBackend.ETCD, RdzvBackend.ETCD_V2):
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
    if raw["run_path"] and raw["start_method"] != StartMethod.SPAWN:
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
    for name in ("master_addr", "local_addr", "metrics_addr"):
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
    --config); inside SLURM the others may come from SLURM's environment. safelaunch's
    own options may be left out of `raw`: they take their defaults (safelaunch.defaults).
    """
    chosen = dict(raw)
    origins: list[str] = []
    unread: list[str] = []
    if explicit is not None:
        slurm = slurm_defaults(environ)
        alone = bool(raw["standalone"])
        if "nnodes" in slurm and "nnodes" not in explicit and not alone:
            chosen["nnodes"] = slurm["nnodes"][0]
        # One node (your --nnodes=1, or --standalone): SLURM's node rank and master are
        # not this job's; its GPU count still is.
        several = parse_nnodes(str(chosen["nnodes"]))[1] > 1 and not alone
        always = {"nproc_per_node"} if alone else {"nproc_per_node", "nnodes"}
        for name, (value, source) in slurm.items():
            if name not in explicit and (name in always or several):
                chosen[name] = value
                origins.append(f"{name}={value} ({source})")
        # said where the variable would have counted: a flag that overrides it silences it
        unread = [
            line
            for name, line in slurm_unread(environ).items()
            if name not in explicit and (name in always or several)
        ]
    raw = chosen
    check_text(raw)
    chosen["nnodes"] = parse_nnodes(str(raw["nnodes"]))
    notices = unsupported_yet(chosen)
    hang = raw.get("hang_timeout", defaults.HANG_AUTO)
    return LaunchConfig(
        training_script=raw["training_script"],
        training_script_args=tuple(raw["training_script_args"]),
        nnodes=chosen["nnodes"],
        nproc_per_node=parse_nproc(str(raw["nproc_per_node"])),
        rdzv_backend=RdzvBackend(raw["rdzv_backend"]),
        rdzv_endpoint=raw["rdzv_endpoint"],
        rdzv_id=raw["rdzv_id"] or None,
        rdzv_conf=parse_rdzv_conf(raw["rdzv_conf"]),
        standalone=raw["standalone"],
        max_restarts=raw["max_restarts"],
        restart_policy=Switch(raw.get("restart_policy", defaults.RESTART_POLICY)),
        monitor_interval=raw["monitor_interval"],
        start_method=StartMethod(raw["start_method"]),
        role=raw["role"],
        module=raw["module"],
        no_python=raw["no_python"],
        run_path=raw["run_path"],
        log_dir=Path(raw["log_dir"] or defaults.LOG_DIR),
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
        hang_timeout=defaults.HANG_TIMEOUT_S if hang == defaults.HANG_AUTO else hang,
        hang_auto=hang == defaults.HANG_AUTO,
        signatures_file=raw.get("signatures") or None,
        debug_profile=DebugProfile(raw.get("debug_profile", defaults.DEBUG_PROFILE)),
        strict=raw.get("strict", False),
        preflight=not raw.get("no_preflight", False),
        lint=not raw.get("no_lint", False),
        local_addr=raw["local_addr"] or None,
        origins=tuple(origins),
        slurm_unread=tuple(unread),
        isolate=Switch(raw.get("isolate", defaults.ISOLATE)),
        isolate_timeout=raw.get("isolate_timeout", defaults.ISOLATE_TIMEOUT_S),
        isolate_single=raw.get("isolate_single", False),
        isolate_nccl=raw.get("isolate_nccl", False),
        on_verdict=raw.get("on_verdict") or None,
        on_verdict_timeout=raw.get("on_verdict_timeout", defaults.ON_VERDICT_TIMEOUT_S),
        metrics_port=raw.get("metrics_port", defaults.METRICS_PORT),
        metrics_addr=raw.get("metrics_addr") or defaults.METRICS_ADDR,
        environ=MappingProxyType(dict(environ)),
        notices=notices,
    )
