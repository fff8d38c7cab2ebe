"""The command line: torchrun 2.13's flags, safelaunch's own options.

This is the one place where errors become exit codes.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import click

from safelaunch import __version__, exitcodes, values
from safelaunch.config import (
    EVENT_LOG_HANDLERS,
    NUMA_BINDINGS,
    RDZV_BACKENDS,
    START_METHODS,
    build_config,
)
from safelaunch.console import Console, color_wanted
from safelaunch.errors import ConfigError, SafelaunchError
from safelaunch.userfiles import BadFile, load_toml

TORCHRUN_SECTION = "torchrun options (same names, defaults and PET_<NAME> variables)"
OWN_SECTION = "safelaunch options"


class _Option(click.Option):
    """An option that knows which --help section it belongs to."""

    def __init__(self, *args: Any, section: str = TORCHRUN_SECTION, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.section = section


class _Command(click.Command):
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


class _Number(click.ParamType):  # type: ignore[type-arg]
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


INT, FLOAT = _Number(integer=True), _Number(integer=False)


def _torchrun(name: str, short: str | None = None, **kwargs: Any) -> Callable[..., Any]:
    """A torchrun flag: dash and underscore spellings, PET_<DEST> from the environment."""
    dest = name.replace("-", "_")
    names = [f"--{name}"] + ([f"--{dest}"] if dest != name else []) + ([short] if short else [])
    envvar = kwargs.pop("envvar", f"PET_{dest.upper()}")
    return click.option(*names, dest, cls=_Option, envvar=envvar, show_default=True, **kwargs)


def _load_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
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
    return click.option(*names, cls=_Option, section=OWN_SECTION, show_default=True, **kwargs)


_OPTIONS = [
    _torchrun(
        "nnodes",
        default="1:1",
        help="Nodes: N or MIN:MAX; one safelaunch per node (in SLURM: its count).",
    ),
    _torchrun("nproc-per-node", default="1", help="Ranks on this node: int, gpu, cpu or auto."),
    _torchrun("rdzv-backend", default="static", type=click.Choice(RDZV_BACKENDS)),
    _torchrun("rdzv-endpoint", default="", help="host[:port] of the rendezvous."),
    _torchrun("rdzv-id", default=None, help="Run id (TORCHELASTIC_RUN_ID)."),
    _torchrun("rdzv-conf", default="", help="k=v,... rendezvous settings."),
    _torchrun("standalone", is_flag=True, help="One node, a free port chosen for you."),
    _torchrun("max-restarts", default=0, type=INT, help="Restarts of the whole job."),
    _torchrun("monitor-interval", default=0.1, type=FLOAT, help="Seconds between checks."),
    _torchrun("start-method", default="spawn", type=click.Choice(START_METHODS)),
    _torchrun("event-log-handler", default="null", type=click.Choice(EVENT_LOG_HANDLERS)),
    _torchrun("role", default="default", help="ROLE_NAME of the ranks."),
    _torchrun("module", "-m", is_flag=True, help="Run the script as `python -m`."),
    _torchrun("no-python", is_flag=True, help="Execute the script directly."),
    _torchrun("run-path", is_flag=True, help="Run the script with runpy.run_path."),
    _torchrun("log-dir", default=None, help="Log directory [default: ./safelaunch_logs]."),
    _torchrun("redirects", "-r", default="0", help="Keep streams off the console: 0-3 or lr:v,..."),
    _torchrun("tee", "-t", default="0", help="Streams also on the console: 0-3 or lr:v,..."),
    _torchrun("local-ranks-filter", default="", help="Console shows only these local ranks."),
    _torchrun("duplicate-stdout-filters", default="", help="Also copy matching stdout lines."),
    _torchrun("duplicate-stderr-filters", default="", help="Also copy matching stderr lines."),
    _torchrun("node-rank", default=0, type=INT, help="Rank of this node (static)."),
    _torchrun("master-addr", default=None, help="MASTER_ADDR [default: localhost]."),
    _torchrun("master-port", default=None, type=INT, help="MASTER_PORT [default: a free port]."),
    _torchrun("local-addr", default=None, help="Address this node advertises."),
    _torchrun("logs-specs", default=None, help="torchrun.logs_specs plugin name."),
    _torchrun("numa-binding", default=None, type=click.Choice(NUMA_BINDINGS)),
    _torchrun(
        "signals-to-handle",
        default="SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        help="Signals forwarded to the ranks, then the job stops. SIGUSR1/SIGUSR2 are "
        "always passed on (under srun SLURM has sent them to every rank) and never stop it.",
    ),
    _torchrun(
        "shutdown-timeout",
        default=30.0,
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
        callback=_load_config,
        envvar="SAFELAUNCH_CONFIG",
        help="TOML file of launch options (any flag, e.g. nproc_per_node = 4; see configs/).",
    ),
    _own(
        "--hang-timeout",
        type=FLOAT,
        default=300.0,
        envvar="SAFELAUNCH_HANG_TIMEOUT",
        help="Seconds without progress on any rank before the job counts as hung; 0: off.",
    ),
    _own(
        "--debug-profile",
        type=click.Choice(["quiet", "default", "full"]),
        default="default",
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
        default="auto",
        envvar="SAFELAUNCH_ISOLATE",
        help="After a failure or hang, rerun the job on Gloo to tell the communication layer "
        "from the program (auto: only when the job used NCCL and the failure can come from "
        "the communication layer; see docs/isolation.md).",
    ),
    _own(
        "--isolate-timeout",
        type=FLOAT,
        default=600.0,
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
        default="auto",
        envvar="SAFELAUNCH_COLOR",
        help="Colour rank prefixes (auto: on a terminal, unless NO_COLOR is set).",
    ),
]


def _with_options(function: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_OPTIONS):
        function = option(function)
    return function


@click.command(
    cls=_Command,
    context_settings={
        "help_option_names": ["-h", "--help"],
        # Everything after the script is the script's, even `--standalone`.
        "allow_interspersed_args": False,
        "max_content_width": 100,
    },
    epilog="Check this machine: safelaunch doctor [--json]. "
    "See what a running job's ranks are doing: safelaunch status [--watch]. "
    "Explain an earlier run's logs: safelaunch explain PATH|-. Check a script for DDP "
    "mistakes: safelaunch lint SCRIPT [--json]. Exit codes: "
    "docs/exit-codes.md. Differences from torchrun: docs/compatibility.md.",
)
@_with_options
@click.version_option(__version__, "--version", prog_name="safelaunch")
@click.argument("training_script")
@click.argument("training_script_args", nargs=-1, type=click.UNPROCESSED)
def command(**raw: Any) -> None:
    """Launch TRAINING_SCRIPT on every rank, as torchrun does, and explain how it ended."""
    raw["color"] = color_wanted(raw["color"])
    console = Console(color=raw["color"])
    # Imported here: `--help` and usage errors should not pay for it.
    from safelaunch.launch import run

    ctx = click.get_current_context()
    explicit = frozenset(
        name
        for name in raw
        if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
    )
    try:
        code = run(build_config(raw, os.environ, explicit), console)
    except SafelaunchError as exc:
        console.say(exc.render(), "error")
        code = exc.exit_code
    except KeyboardInterrupt:
        console.say("interrupted before any rank started")
        code = exitcodes.for_signal(2)
    except Exception:
        import traceback  # only on this path: a bug in safelaunch

        console.say(traceback.format_exc().rstrip(), "plain")
        console.say("internal error: this is a bug in safelaunch; please report it", "error")
        code = exitcodes.INTERNAL
    sys.exit(code)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--signatures",
    default=None,
    envvar="SAFELAUNCH_SIGNATURES",
    help="TOML file of your own failure signatures.",
)
@click.argument("where", metavar="PATH|-")
def explain_command(where: str, signatures: str | None) -> None:
    """Explain a failed run from its logs: a safelaunch or torchrun log directory, or one
    combined log (a SLURM .out file with [rankN]: / [default0]: prefixes); - reads stdin."""
    from safelaunch.diagnose.user_signatures import load
    from safelaunch.explain import explain

    console = Console(color=color_wanted("auto", sys.stderr.buffer))
    try:
        text = explain(where, load(signatures))
    except SafelaunchError as exc:
        console.say(exc.render(), "error")
        sys.exit(exc.exit_code)
    console.emit((text + "\n").encode())


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--nproc-per-node",
    "--nproc_per_node",
    "nproc",
    type=_Number(integer=True, low=1, high=values.MAX_NPROC),
    default=None,
    help="Ranks to check the GPU mapping for [default: one per visible GPU].",
)
@click.option("--master-addr", "--master_addr", "master_addr", default=None)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def doctor_command(nproc: int | None, master_addr: str | None, as_json: bool) -> None:
    """Run every preflight check without launching: GPUs and their mapping, torch / CUDA /
    NCCL, /dev/shm, limits, interfaces, addresses. Exit 78 when a check fails."""
    from safelaunch.doctor import doctor

    try:
        if master_addr:
            values.host("--master-addr", master_addr)
        text, code = doctor(nproc, master_addr, as_json)
    except SafelaunchError as exc:
        Console().say(exc.render(), "error")
        sys.exit(exc.exit_code)
    Console().emit((text + "\n").encode())
    sys.exit(code)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--log-dir",
    "--log_dir",
    "log_dir",
    envvar="PET_LOG_DIR",
    default="safelaunch_logs",
    show_default=True,
    help="Where the runs are (the launch's --log-dir).",
)
@click.option("--watch", is_flag=True, help="Refresh until the job ends (Ctrl-C to stop).")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes with --watch.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--stacks",
    is_flag=True,
    help="Also ask every rank on this host for a live dump of its threads (it runs on).",
)
@click.argument("run", required=False, metavar="[RUN]")
def status_command(
    run: str | None, log_dir: str, watch: bool, interval: float, as_json: bool, stacks: bool
) -> None:
    """What every rank of a job is doing now: state, step, collectives, time since its last
    progress, where it is in your code, CPU / memory / GPU memory. RUN: a run directory or
    run id (default: the latest run under --log-dir). Read-only, except --stacks."""
    from pathlib import Path

    from safelaunch import status

    console = Console(color=color_wanted("auto", sys.stderr.buffer))
    out = Console(color=color_wanted("auto", sys.stdout.buffer))
    try:
        if watch and not stacks:
            status.watch(
                run,
                Path(log_dir),
                interval=interval,
                in_place=sys.stdout.isatty() and not as_json,
                colour=out.color,
                as_json_output=as_json,
                emit=lambda text: out.emit(text.encode()),
            )
        else:
            text = status.show(
                run, Path(log_dir), as_json_output=as_json, colour=out.color, stacks=stacks
            )
            out.emit((text + "\n").encode())
    except SafelaunchError as exc:
        console.say(exc.render(), "error")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(0)  # the end of a --watch
    sys.exit(0)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.argument("script", type=click.Path(dir_okay=False))
def lint_command(script: str, as_json: bool) -> None:
    """Check a training script for DDP mistakes without running it (Python's ast: nothing
    is imported). Exit 1 when an error or warning is found, 0 for hints or nothing."""
    from safelaunch.lint.report import lint_report

    text, code = lint_report(script, as_json)
    if code == exitcodes.USAGE and not as_json:
        Console(color=color_wanted("auto", sys.stderr.buffer)).say(text, "error")
    else:
        Console().emit((text + "\n").encode())
    sys.exit(code)


class EarlyInterrupt(BaseException):
    """Ctrl-C before the launcher's own handlers are in place.

    Not a KeyboardInterrupt: click turns that into "Aborted!" and exit 1 while it parses.
    A BaseException passes every `except Exception` (and runs every `finally`) on its way
    out to main(), which makes it exit 130 without a traceback.
    """


def _early_interrupt(signum: int, frame: object) -> None:
    raise EarlyInterrupt


def main() -> None:
    """Console-script entry point: `safelaunch explain|doctor|status|lint ...`, else a launch."""
    _subcommands()
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when ignored (&)
        signal.signal(signal.SIGINT, _early_interrupt)
    try:
        command(prog_name="safelaunch")
    except EarlyInterrupt:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write("safelaunch: interrupted before any rank started\n")
        sys.exit(exitcodes.for_signal(signal.SIGINT))


def _subcommands() -> None:
    # A subcommand word only where a script name would stand: ./explain still launches.
    if sys.argv[1:2] == ["explain"]:
        explain_command(args=sys.argv[2:], prog_name="safelaunch explain")
    if sys.argv[1:2] == ["doctor"]:
        doctor_command(args=sys.argv[2:], prog_name="safelaunch doctor")
    if sys.argv[1:2] == ["status"]:
        status_command(args=sys.argv[2:], prog_name="safelaunch status")
    if sys.argv[1:2] == ["lint"]:
        lint_command(args=sys.argv[2:], prog_name="safelaunch lint")
