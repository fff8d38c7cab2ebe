"""The launch command's options: torchrun 2.13's flags, safelaunch's own, --config files.

Defaults are safelaunch/defaults.py's; --help shows them in two sections.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import click

from safelaunch import defaults, values
from safelaunch.config import (
    EVENT_LOG_HANDLERS,
    NUMA_BINDINGS,
    RDZV_BACKENDS,
    START_METHODS,
    STD_NONE,
)
from safelaunch.errors import ConfigError
from safelaunch.userfiles import BadFile, load_toml

TORCHRUN_SECTION = "torchrun options (same names, defaults and PET_<NAME> variables)"
OWN_SECTION = "safelaunch options"


class SectionedOption(click.Option):
    """An option that knows which --help section it belongs to."""

    def __init__(self, *args: Any, section: str = TORCHRUN_SECTION, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.section = section


class SectionedCommand(click.Command):
    """--help with the options in their sections."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {TORCHRUN_SECTION: [], OWN_SECTION: []}
        for param in self.get_params(ctx):
            if not isinstance(param, click.Option):
                continue
            record = param.get_help_record(ctx)
            if record is not None:
                sections[getattr(param, "section", OWN_SECTION)].append(record)
        for title, rows in sections.items():
            with formatter.section(title):
                formatter.write_dl(rows)


class Number(click.ParamType):  # type: ignore[type-arg]
    """An ASCII integer or finite number (safelaunch.values); bounds are LaunchConfig's."""

    def __init__(self, integer: bool, low: float | None = None, high: float | None = None) -> None:
        self.integer = integer
        self.name = "integer" if integer else "number"
        self.bounds = (low, high)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value  # a default
        parse = values.integer if self.integer else values.number
        try:
            number = parse("", str(value))
            low, high = self.bounds
            if low is not None and high is not None:
                values.bounded("", number, low, high, "")
        except ConfigError as exc:
            self.fail(exc.message.removeprefix("="), param, ctx)
        return number


INT, FLOAT = Number(integer=True), Number(integer=False)


def _torchrun(name: str, short: str | None = None, **kwargs: Any) -> Callable[..., Any]:
    """A torchrun flag: dash and underscore spellings, PET_<DEST> from the environment."""
    dest = name.replace("-", "_")
    names = [f"--{name}"] + ([f"--{dest}"] if dest != name else []) + ([short] if short else [])
    envvar = kwargs.pop("envvar", f"PET_{dest.upper()}")
    return click.option(
        *names, dest, cls=SectionedOption, envvar=envvar, show_default=True, **kwargs
    )


def load_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """--config FILE: TOML whose keys are launch options; the command line and env still win."""
    if value is None:
        return
    shown = value if value.isprintable() else repr(value)  # one line, no terminal escapes
    try:
        data = load_toml(value)
    except BadFile as exc:
        raise click.BadParameter(f"{shown}: {exc}", ctx, param) from None
    options = {p.name for p in ctx.command.params if isinstance(p, click.Option)}
    defaults = {}
    for key, setting in data.items():
        name = key.replace("-", "_")
        if name not in options or name in ("config", "help", "version"):
            raise click.BadParameter(f"{shown}: {key!r} is not a launch option", ctx, param)
        if isinstance(setting, float) and not math.isfinite(setting):
            raise click.BadParameter(
                f"{shown}: {key} = {setting} is not a finite number", ctx, param
            )
        if not isinstance(setting, (str, int, float, bool)):
            raise click.BadParameter(
                f"{shown}: {key} must be a string, number or true/false, not a TOML "
                f"{type(setting).__name__}",
                ctx,
                param,
            )
        # Through the option's own type, exactly as the same text on the command line.
        defaults[name] = str(setting).lower() if isinstance(setting, bool) else str(setting)
    ctx.default_map = {**(ctx.default_map or {}), **defaults}


def _own(*names: str, **kwargs: Any) -> Callable[..., Any]:
    return click.option(
        *names, cls=SectionedOption, section=OWN_SECTION, show_default=True, **kwargs
    )


LAUNCH_OPTIONS = [
    _torchrun(
        "nnodes",
        default="{}:{}".format(*defaults.NNODES),
        help="Nodes: N or MIN:MAX; one safelaunch per node (in SLURM: its count).",
    ),
    _torchrun(
        "nproc-per-node",
        default=str(defaults.NPROC_PER_NODE),
        help="Ranks on this node: int, gpu, cpu or auto.",
    ),
    _torchrun("rdzv-backend", default=defaults.RDZV_BACKEND, type=click.Choice(RDZV_BACKENDS)),
    _torchrun("rdzv-endpoint", default="", help="host[:port] of the rendezvous."),
    _torchrun("rdzv-id", default=None, help="Run id (TORCHELASTIC_RUN_ID)."),
    _torchrun("rdzv-conf", default="", help="k=v,... rendezvous settings."),
    _torchrun("standalone", is_flag=True, help="One node, a free port chosen for you."),
    _torchrun(
        "max-restarts", default=defaults.MAX_RESTARTS, type=INT, help="Restarts of the whole job."
    ),
    _torchrun(
        "monitor-interval",
        default=defaults.MONITOR_INTERVAL_S,
        type=FLOAT,
        help="Seconds between checks.",
    ),
    _torchrun("start-method", default=defaults.START_METHOD, type=click.Choice(START_METHODS)),
    _torchrun(
        "event-log-handler",
        default=defaults.EVENT_LOG_HANDLER,
        type=click.Choice(EVENT_LOG_HANDLERS),
    ),
    _torchrun("role", default=defaults.ROLE, help="ROLE_NAME of the ranks."),
    _torchrun("module", "-m", is_flag=True, help="Run the script as `python -m`."),
    _torchrun("no-python", is_flag=True, help="Execute the script directly."),
    _torchrun("run-path", is_flag=True, help="Run the script with runpy.run_path."),
    _torchrun("log-dir", default=None, help=f"Log directory [default: ./{defaults.LOG_DIR}]."),
    _torchrun(
        "redirects",
        "-r",
        default=str(STD_NONE),
        help="Keep streams off the console: 0-3 or lr:v,...",
    ),
    _torchrun(
        "tee", "-t", default=str(STD_NONE), help="Streams also on the console: 0-3 or lr:v,..."
    ),
    _torchrun("local-ranks-filter", default="", help="Console shows only these local ranks."),
    _torchrun("duplicate-stdout-filters", default="", help="Also copy matching stdout lines."),
    _torchrun("duplicate-stderr-filters", default="", help="Also copy matching stderr lines."),
    _torchrun(
        "node-rank", default=defaults.NODE_RANK, type=INT, help="Rank of this node (static)."
    ),
    _torchrun("master-addr", default=None, help=f"MASTER_ADDR [default: {defaults.MASTER_ADDR}]."),
    _torchrun("master-port", default=None, type=INT, help="MASTER_PORT [default: a free port]."),
    _torchrun("local-addr", default=None, help="Address this node advertises."),
    _torchrun("logs-specs", default=None, help="torchrun.logs_specs plugin name."),
    _torchrun("numa-binding", default=None, type=click.Choice(NUMA_BINDINGS)),
    _torchrun(
        "signals-to-handle",
        default=",".join(s.name for s in defaults.SIGNALS_TO_HANDLE),
        help="Signals forwarded to the ranks, then the job stops. SIGUSR1/SIGUSR2 are "
        "always passed on (under srun SLURM has sent them to every rank) and never stop it.",
    ),
    _torchrun(
        "shutdown-timeout",
        default=defaults.SHUTDOWN_TIMEOUT_S,
        type=FLOAT,
        envvar=["PET_SHUTDOWN_TIMEOUT", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"],
        help="Seconds from SIGTERM to SIGKILL, on every path.",
    ),
    _torchrun("virtual-local-rank", is_flag=True, help="LOCAL_RANK=0, one GPU per rank."),
    _own(
        "--config",
        type=click.Path(dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=load_config,
        envvar="SAFELAUNCH_CONFIG",
        help="TOML file of launch options (any flag, e.g. nproc_per_node = 4; see configs/).",
    ),
    _own(
        "--hang-timeout",
        type=FLOAT,
        default=defaults.HANG_TIMEOUT_S,
        envvar="SAFELAUNCH_HANG_TIMEOUT",
        help="Seconds without progress on any rank before the job counts as hung; 0: off.",
    ),
    _own(
        "--debug-profile",
        type=click.Choice(["quiet", "default", "full"]),
        default=defaults.DEBUG_PROFILE,
        envvar="SAFELAUNCH_DEBUG_PROFILE",
        help="Debug variables for the ranks (never over yours): NCCL log per rank, flight "
        "recorder; full adds C++ stacks, TORCH_DISTRIBUTED_DEBUG=INFO, CUDA_LAUNCH_BLOCKING.",
    ),
    _own(
        "--strict",
        is_flag=True,
        envvar="SAFELAUNCH_STRICT",
        help="Preflight warnings (busy GPU, small /dev/shm, ...) stop the launch too.",
    ),
    _own(
        "--no-preflight",
        is_flag=True,
        envvar="SAFELAUNCH_NO_PREFLIGHT",
        help="Skip the environment checks (rank count and port are still resolved).",
    ),
    _own(
        "--no-lint",
        is_flag=True,
        envvar="SAFELAUNCH_NO_LINT",
        help="Skip the static check of the script for DDP mistakes (safelaunch lint SCRIPT).",
    ),
    _own(
        "--signatures",
        default=None,
        envvar="SAFELAUNCH_SIGNATURES",
        help="TOML file of your own failure signatures, matched before the built-in ones.",
    ),
    _own(
        "--isolate",
        type=click.Choice(["auto", "always", "never"]),
        default=defaults.ISOLATE,
        envvar="SAFELAUNCH_ISOLATE",
        help="After a failure or hang, rerun the job on Gloo to tell the communication layer "
        "from the program (auto: only when the job used NCCL and the failure can come from "
        "the communication layer; see docs/isolation.md).",
    ),
    _own(
        "--isolate-timeout",
        type=FLOAT,
        default=defaults.ISOLATE_TIMEOUT_S,
        envvar="SAFELAUNCH_ISOLATE_TIMEOUT",
        help="Cap, in seconds, on each isolation rerun (it stops sooner once past the "
        "point where the job failed).",
    ),
    _own(
        "--isolate-single",
        is_flag=True,
        envvar="SAFELAUNCH_ISOLATE_SINGLE",
        help="Also rerun with one rank: a distributed fault or a single-process one?",
    ),
    _own(
        "--isolate-nccl",
        is_flag=True,
        envvar="SAFELAUNCH_ISOLATE_NCCL",
        help="Also rerun with NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_IB_DISABLE=1 in turn: "
        "which transport makes the failure go away?",
    ),
    _own(
        "--color",
        type=click.Choice(["auto", "always", "never"]),
        default=defaults.COLOR,
        envvar="SAFELAUNCH_COLOR",
        help="Colour rank prefixes (auto: on a terminal, unless NO_COLOR is set).",
    ),
]


def with_launch_options(function: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(LAUNCH_OPTIONS):
        function = option(function)
    return function
