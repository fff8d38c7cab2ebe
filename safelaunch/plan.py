"""LaunchPlan: one WorkerSpec per rank, built once, never mutated.

This is the only place a rank's environment is assembled (torch elastic builds
it in three); what differs from torchrun 2.13 is listed in docs/compatibility.md.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from safelaunch.config import STD_ALL, STD_ERR, STD_OUT, LaunchConfig
from safelaunch.debugenv import PROFILES
from safelaunch.preflight import PreflightReport
from safelaunch.rank import names
from safelaunch.rendezvous import Placement
from safelaunch.rundir import (
    calls_file,
    comm_file,
    flight_file,
    heartbeat_file,
    layout,
    ledger_file,
    rank_logs,
    stack_files,
)

TOKEN_VAR = "SAFELAUNCH_RUN_TOKEN"  # lets the sweep find descendants that left our tree
ATTEMPT_DIR_VAR = "SAFELAUNCH_ATTEMPT_DIR"
# Asks a rank's faulthandler for every thread's stack. A real-time signal, because
# SIGUSR1/2 are often the user's own (SLURM --signal) and would stop doing their job.
DUMP_SIGNAL = signal.SIGRTMIN + 4
GLOO_TIMEOUT_FACTOR = 4  # a Gloo rerun's collectives are slower: the user's timeouts stretch


# An isolation rerun is a diagnostic: its ranks skip checkpoints (SAFELAUNCH_RERUN), so no
# save is worth waiting for when it is stopped (a user's Ctrl-C, its time box). Ranks
# blocked in a collective whose peer left can ignore SIGTERM/SIGINT until torch's timeout;
# with the job's --shutdown-timeout (30 s) a Ctrl-C during a rerun took 30 s to be honoured.
RERUN_SHUTDOWN_S = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RunIdentity:
    """Names shared by every attempt of one run."""

    run_id: str
    run_dir: Path
    token: str
    private_dir: Path  # mode 0700: heartbeats and stack dumps, removed at the end
    launcher_pid: int  # ranks die with it


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvChoice:
    """A variable safelaunch set because the user had not, and why."""

    name: str
    value: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Timebox:
    """When an isolation rerun has shown enough: clearly past the point where the job failed."""

    past_step: int | None  # every live rank reported a step beyond this (safelaunch.heartbeat)
    past_seq: int | None  # else: every live rank issued more collectives than this
    after_s: float | None  # else, with neither marker known: ran this long
    cap_s: float  # never longer than this


@dataclass(frozen=True, slots=True, kw_only=True)
class Rerun:
    """How an isolation rerun differs from the job as the user launched it."""

    name: str  # its directory in the run: isolate_gloo, isolate_single, isolate_nccl_p2p, ...
    purpose: str  # for people: "on Gloo", "with one rank", "with NCCL_P2P_DISABLE=1"
    gloo: bool  # the ranks swap NCCL for Gloo
    nproc: int | None  # None: as many ranks as the job
    env: Mapping[str, str]  # variables added for this rerun
    timebox: Timebox
    why: str = "to tell where the fault is"  # said as it starts, after the purpose


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSpec:
    """Everything needed to start one rank and route its output."""

    rank: int
    local_rank: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    log_path: Path
    error_file: Path
    console_streams: int  # Std bits shown on the console; files always get all
    bootstrapped: bool  # runs through safelaunch.rank.bootstrap (heartbeat, stack dumps)
    heartbeat_file: Path
    stacks_file: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchPlan:
    """One attempt of the job."""

    run: RunIdentity
    attempt: int
    attempt_dir: Path
    workers: tuple[WorkerSpec, ...]
    # Two pipes per rank only when the console or the filters must tell stdout
    # from stderr: one shared pipe keeps the exact order of the two streams.
    split_streams: bool
    duplicate_filters: Mapping[int, tuple[str, ...]]
    shutdown_timeout: float
    monitor_interval: float
    color: bool
    env_choices: tuple[EnvChoice, ...]
    heartbeat_dir: Path
    hang_timeout: float  # 0: off; with hang_auto, the deadline until the rhythm is known
    heartbeat_interval: float
    rerun: Rerun | None = None  # an isolation rerun, not an attempt of the job
    node: int | None = None  # multi-node: this node's rank, shown in the console prefix
    hang_auto: bool = False  # --hang-timeout auto: the deadline is learned (hangs/rhythm.py)


def worker_argv(config: LaunchConfig) -> tuple[str, ...]:
    """The command every rank runs: torchrun's `python -u script args`, through the bootstrap.

    --run-path runs the script in the rank's own interpreter, as torchrun does
    (runpy there, the same as a script here).
    """
    args = config.training_script_args
    script = config.training_script
    if config.no_python and not config.run_path:
        return (script, *args)
    mode = "module" if config.module and not config.run_path else "script"
    return (sys.executable, "-u", "-c", names.BOOTSTRAP_CODE, mode, script, *args)


# --hang-timeout auto: the learned deadline may be as short as its 7 s floor
AUTO_HEARTBEAT_S = 1.0


def heartbeat_interval(hang_timeout: float, auto: bool = False) -> float:
    """A tenth of the timeout, within 0.2-2 s: detection lags the timeout by at most that."""
    return AUTO_HEARTBEAT_S if auto else min(2.0, max(0.2, hang_timeout / 10))


def shared_env(
    config: LaunchConfig, nproc: int, run: RunIdentity
) -> tuple[dict[str, str], tuple[EnvChoice, ...]]:
    """Variables equal for every rank: the launcher's env plus our defaults."""
    env = dict(config.environ)
    choices: list[EnvChoice] = []

    def default(name: str, value: str, reason: str) -> None:
        if name not in env:
            env[name] = value
            choices.append(EnvChoice(name=name, value=value, reason=reason))

    if nproc > 1:
        default("OMP_NUM_THREADS", "1", f"unset, and {nproc} ranks share this host")
    default("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", "torchrun's default")
    default("PYTHONUNBUFFERED", "1", "live output")
    attempt_dir = layout.attempt_pattern(run.run_dir)
    for name, value, reason in PROFILES[config.debug_profile]:
        # {rank} stays a placeholder here and is filled in by rank_env
        default(name, value.replace("{attempt}", attempt_dir), reason)
    env[TOKEN_VAR] = run.token
    return env, tuple(choices)


def rank_env(
    base: Mapping[str, str],
    choices: tuple[EnvChoice, ...],
    config: LaunchConfig,
    preflight: PreflightReport,
    run: RunIdentity,
    attempt: int,
    local_rank: int,
    error_file: Path,
    rerun: Rerun | None = None,
    placement: Placement | None = None,
) -> Mapping[str, str]:
    """The full, frozen environment of one rank."""
    nproc = rerun.nproc if rerun is not None and rerun.nproc else preflight.nproc
    agent_store = placement is not None  # an elastic round of one node too (below)
    if placement is None:  # one node: rank 0 hosts the workers' store
        placement = Placement(
            node=0,
            nodes=1,
            base_rank=0,
            world_size=nproc,
            master_addr=preflight.master_addr,
            master_port=preflight.master_port.port,
            run_id=config.rdzv_id or run.run_id,
            hosts=(),
            nprocs=(nproc,),
        )
    rank = placement.base_rank + local_rank
    attempt_dir = error_file.parent
    env = dict(base)
    for choice in choices:  # only safelaunch's own values carry placeholders
        env[choice.name] = choice.value.replace("attempt_{n}", attempt_dir.name).replace(
            "{rank}", str(rank)
        )
    env.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(local_rank),
            "GROUP_RANK": str(placement.node),
            "ROLE_RANK": str(rank),
            "ROLE_NAME": config.role,
            "LOCAL_WORLD_SIZE": str(nproc),
            "WORLD_SIZE": str(placement.world_size),
            "GROUP_WORLD_SIZE": str(placement.nodes),
            "ROLE_WORLD_SIZE": str(placement.world_size),
            "MASTER_ADDR": placement.master_addr,
            "MASTER_PORT": str(placement.master_port),
            "TORCHELASTIC_RESTART_COUNT": str(
                attempt if placement.restart_count is None else placement.restart_count
            ),
            "TORCHELASTIC_MAX_RESTARTS": str(config.max_restarts),
            "TORCHELASTIC_RUN_ID": placement.run_id,
            # One node: the launcher never imports torch, so it hosts no TCPStore and
            # rank 0 does, as with a plain env:// init (documented difference). Placed by
            # a rendezvous (several nodes, or an elastic round of one): node 0's launcher
            # hosts it, as torchrun's agent does.
            "TORCHELASTIC_USE_AGENT_STORE": str(agent_store),
            "TORCHELASTIC_ERROR_FILE": str(error_file),
            "TORCHELASTIC_SIGNALS_TO_HANDLE": ",".join(s.name for s in config.signals_to_handle),
            ATTEMPT_DIR_VAR: str(error_file.parent),
        }
    )
    heartbeat_dir = run.private_dir / attempt_dir.name
    env[names.COMM_FILE] = str(comm_file.path(attempt_dir, rank))
    env[names.CALLS_FILE] = str(calls_file.path(attempt_dir, rank))
    if rerun is not None:
        env[names.RERUN] = rerun.name
        env.update(rerun.env)
        if rerun.gloo:
            env[names.FORCE_GLOO] = "1"
            env[names.TIMEOUT_FACTOR] = str(GLOO_TIMEOUT_FACTOR)
            env[names.COLLECTIVES_FILE] = str(attempt_dir / ledger_file.name(rank))
    env[names.LAUNCHER_PID] = str(run.launcher_pid)
    env[names.DUMP_SIGNAL] = str(int(DUMP_SIGNAL))
    env[names.STACKS_FILE] = str(stack_files.dump_file(heartbeat_dir, rank))
    env[names.FLIGHT_DIR] = str(flight_file.directory(attempt_dir))
    if config.hang_timeout > 0:
        env[names.HEARTBEAT_DIR] = str(heartbeat_dir)
        interval = heartbeat_interval(config.hang_timeout, config.hang_auto)
        env[names.HEARTBEAT_INTERVAL] = str(interval)
    if config.virtual_local_rank:
        env["LOCAL_RANK"] = "0"
        visible = config.environ.get("CUDA_VISIBLE_DEVICES")
        devices = [d.strip() for d in visible.split(",")] if visible is not None else None
        env["CUDA_VISIBLE_DEVICES"] = (
            devices[local_rank]
            if devices is not None and local_rank < len(devices)
            else str(local_rank)
        )
    return MappingProxyType(env)


def console_streams(config: LaunchConfig, local_rank: int) -> int:
    """Which of a rank's streams reach the console (-r, -t, --local-ranks-filter)."""
    if config.local_ranks_filter is not None and local_rank not in config.local_ranks_filter:
        return 0
    redirected = config.redirects.for_rank(local_rank)
    teed = config.tee.for_rank(local_rank)
    return (STD_ALL & ~redirected) | teed


def build_plan(
    config: LaunchConfig,
    preflight: PreflightReport,
    run: RunIdentity,
    attempt: int,
    rerun: Rerun | None = None,
    placement: Placement | None = None,
) -> LaunchPlan:
    """The attempt's (or an isolation rerun's) plan; pure, so the same inputs give the same plan.

    A rerun repeats `attempt` (same arguments, same restart count) in its own directory.
    """
    name = rerun.name if rerun is not None else layout.attempt_name(attempt)
    attempt_dir = run.run_dir / name
    heartbeat_dir = run.private_dir / name
    nproc = rerun.nproc if rerun is not None and rerun.nproc else preflight.nproc
    base, choices = shared_env(config, nproc, run)
    argv = worker_argv(config)
    bootstrapped = argv[:4] == (sys.executable, "-u", "-c", names.BOOTSTRAP_CODE)
    workers = []
    for local_rank in range(nproc):
        rank = (placement.base_rank if placement else 0) + local_rank
        error_file = rank_logs.error_file(attempt_dir, rank)
        workers.append(
            WorkerSpec(
                rank=rank,
                local_rank=local_rank,
                argv=argv,
                env=rank_env(
                    base,
                    choices,
                    config,
                    preflight,
                    run,
                    attempt,
                    local_rank,
                    error_file,
                    rerun,
                    placement,
                ),
                log_path=rank_logs.log(attempt_dir, rank),
                error_file=error_file,
                console_streams=console_streams(config, local_rank),
                bootstrapped=bootstrapped,
                heartbeat_file=heartbeat_file.path(heartbeat_dir, rank),
                stacks_file=stack_files.dump_file(heartbeat_dir, rank),
            )
        )
    filters = {STD_OUT: config.duplicate_stdout_filters, STD_ERR: config.duplicate_stderr_filters}
    split = bool(config.duplicate_stdout_filters or config.duplicate_stderr_filters) or any(
        w.console_streams not in (0, STD_ALL) for w in workers
    )
    return LaunchPlan(
        run=run,
        attempt=attempt,
        attempt_dir=attempt_dir,
        workers=tuple(workers),
        split_streams=split,
        duplicate_filters=MappingProxyType(filters),
        shutdown_timeout=(
            config.shutdown_timeout
            if rerun is None
            else min(config.shutdown_timeout, RERUN_SHUTDOWN_S)
        ),
        monitor_interval=config.monitor_interval,
        color=config.color,
        env_choices=choices,
        heartbeat_dir=heartbeat_dir,
        hang_timeout=config.hang_timeout,
        heartbeat_interval=heartbeat_interval(config.hang_timeout, config.hang_auto),
        hang_auto=config.hang_auto and config.hang_timeout > 0,
        rerun=rerun,
        node=placement.node if placement is not None and placement.nodes > 1 else None,
    )
