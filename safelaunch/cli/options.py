"""The launch command's options: torchrun 2.13's flags, safelaunch's own, --config files.

Defaults are safelaunch/defaults.py's; --help shows them in two sections. Where a value
comes from when the command line does not give it: safelaunch/cli/sources.py.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any, NamedTuple

from safelaunch import __version__, defaults, values
from safelaunch.cli.parser import Parser
from safelaunch.config import (
    EVENT_LOG_HANDLERS,
    NUMA_BINDINGS,
    RDZV_BACKENDS,
    START_METHODS,
    STD_NONE,
)
from safelaunch.errors import ConfigError

TORCHRUN_SECTION = "torchrun options (same names, defaults and PET_<NAME> variables)"
OWN_SECTION = "safelaunch options"
SCRIPT = "TRAINING_SCRIPT"


class Number:
    """An ASCII integer or finite number (safelaunch.values); bounds are LaunchConfig's."""

    def __init__(self, integer: bool, low: float | None = None, high: float | None = None) -> None:
        self.integer = integer
        self.metavar = "INTEGER" if integer else "NUMBER"
        self.bounds = (low, high)

    def __call__(self, text: str) -> float:
        parse = values.integer if self.integer else values.number
        try:
            number = parse("", text)
            low, high = self.bounds
            if low is not None and high is not None:
                values.bounded("", number, low, high, "")
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(exc.message.removeprefix("=")) from None
        return number


INT, FLOAT = Number(integer=True), Number(integer=False)


class HangTimeout:
    """--hang-timeout: `auto`, or seconds (0: off)."""

    metavar = "SECONDS|auto"

    def __call__(self, text: str) -> float | str:
        if text.strip().lower() == defaults.HANG_AUTO:
            return defaults.HANG_AUTO
        return FLOAT(text)


def not_a_directory(path: str) -> str:
    """A file name that does not name a directory (--config, lint's SCRIPT)."""
    if os.path.isdir(path):
        shown = path if path.isprintable() else repr(path)
        raise argparse.ArgumentTypeError(f"File '{shown}' is a directory.")
    return path


def a_script_file(path: str) -> str:
    """lint's SCRIPT: not a directory, and not a pipe or device (opening a FIFO nobody
    writes would block for ever)."""
    import stat

    not_a_directory(path)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return path  # missing or unreadable: lint says so, with its exit code
    if not stat.S_ISREG(mode):
        shown = path if path.isprintable() else repr(path)
        raise argparse.ArgumentTypeError(f"'{shown}' is a pipe or device, not a script file")
    return path


class Spec(NamedTuple):
    """One launch option: its names, where its value may come from, and --help's line."""

    names: tuple[str, ...]
    dest: str
    section: str
    default: Any
    env: tuple[str, ...]
    help: str
    flag: bool = False
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str = "TEXT"

    @property
    def shown_default(self) -> str | None:
        """What --help shows as `[default: X]` (None: nothing)."""
        if self.default is None or self.flag:
            return None
        return '""' if self.default == "" else str(self.default)


def _spec(names: tuple[str, ...], dest: str, section: str, kwargs: dict[str, Any]) -> Spec:
    if kwargs.get("type") is not None and "metavar" not in kwargs:
        kwargs["metavar"] = kwargs["type"].metavar
    if kwargs.get("choices"):
        kwargs["metavar"] = "[" + "|".join(kwargs["choices"]) + "]"
        kwargs["choices"] = tuple(kwargs["choices"])
    kwargs.setdefault("default", False if kwargs.get("flag") else None)
    kwargs.setdefault("help", "")
    return Spec(names, dest, section, **kwargs)


def _torchrun(name: str, short: str | None = None, **kwargs: Any) -> Spec:
    """A torchrun flag: dash and underscore spellings, PET_<DEST> from the environment."""
    dest = name.replace("-", "_")
    names = ((short,) if short else ()) + (f"--{name}",) + ((f"--{dest}",) if dest != name else ())
    kwargs.setdefault("env", (f"PET_{dest.upper()}",))
    return _spec(names, dest, TORCHRUN_SECTION, kwargs)


def _own(name: str, **kwargs: Any) -> Spec:
    """One of safelaunch's options: one spelling, SAFELAUNCH_<DEST> from the environment."""
    dest = name.replace("-", "_")
    kwargs.setdefault("env", (f"SAFELAUNCH_{dest.upper()}",))
    return _spec((f"--{name}",), dest, OWN_SECTION, kwargs)


LAUNCH_OPTIONS = (
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
    _torchrun("rdzv-backend", default=defaults.RDZV_BACKEND, choices=RDZV_BACKENDS),
    _torchrun("rdzv-endpoint", default="", help="host[:port] of the rendezvous."),
    _torchrun("rdzv-id", default=None, help="Run id (TORCHELASTIC_RUN_ID)."),
    _torchrun("rdzv-conf", default="", help="k=v,... rendezvous settings."),
    _torchrun("standalone", flag=True, help="One node, a free port chosen for you."),
    _torchrun(
        "max-restarts", default=defaults.MAX_RESTARTS, type=INT, help="Restarts of the whole job."
    ),
    _torchrun(
        "monitor-interval",
        default=defaults.MONITOR_INTERVAL_S,
        type=FLOAT,
        help="Seconds between checks.",
    ),
    _torchrun("start-method", default=defaults.START_METHOD, choices=START_METHODS),
    _torchrun(
        "event-log-handler",
        default=defaults.EVENT_LOG_HANDLER,
        choices=EVENT_LOG_HANDLERS,
    ),
    _torchrun("role", default=defaults.ROLE, help="ROLE_NAME of the ranks."),
    _torchrun("module", "-m", flag=True, help="Run the script as `python -m`."),
    _torchrun("no-python", flag=True, help="Execute the script directly."),
    _torchrun("run-path", flag=True, help="Run the script with runpy.run_path."),
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
    # the two torchrun options without action=env: torchrun reads no PET_ variable for them
    _torchrun("logs-specs", default=None, env=(), help="torchrun.logs_specs plugin name."),
    _torchrun("numa-binding", default=None, env=(), choices=NUMA_BINDINGS),
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
        env=("PET_SHUTDOWN_TIMEOUT", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"),
        help="Seconds from SIGTERM to SIGKILL, on every path.",
    ),
    _torchrun("virtual-local-rank", flag=True, help="LOCAL_RANK=0, one GPU per rank."),
    _own(
        "config",
        type=not_a_directory,
        metavar="FILE",
        help="TOML file of launch options (any flag, e.g. nproc_per_node = 4; see configs/).",
    ),
    _own(
        "hang-timeout",
        type=HangTimeout(),
        default=defaults.HANG_AUTO,
        help="Seconds without progress on any rank before the job counts as hung; 0: off; "
        "auto: learned from the job's own step rhythm (docs/hang-detection.md).",
    ),
    _own(
        "debug-profile",
        choices=["quiet", "default", "full"],
        default=defaults.DEBUG_PROFILE,
        help="Debug variables for the ranks (never over yours): NCCL log per rank, flight "
        "recorder; full adds C++ stacks, TORCH_DISTRIBUTED_DEBUG=INFO, CUDA_LAUNCH_BLOCKING.",
    ),
    _own(
        "strict",
        flag=True,
        help="Preflight warnings (busy GPU, small /dev/shm, ...) stop the launch too.",
    ),
    _own(
        "no-preflight",
        flag=True,
        help="Skip the environment checks (rank count and port are still resolved).",
    ),
    _own(
        "no-lint",
        flag=True,
        help="Skip the static check of the script for DDP mistakes (safelaunch lint SCRIPT).",
    ),
    _own(
        "signatures",
        default=None,
        help="TOML file of your own failure signatures, matched before the built-in ones.",
    ),
    _own(
        "restart-policy",
        choices=["auto", "always", "never"],
        default=defaults.RESTART_POLICY,
        help="Which failures --max-restarts restarts (auto: not one that would repeat: a "
        "deterministic signature, or the same failure at the same step again; always: "
        "every one, as torchrun; never: none). See docs/restarts.md.",
    ),
    _own(
        "isolate",
        choices=["auto", "always", "never"],
        default=defaults.ISOLATE,
        help="After a failure or hang, rerun the job on Gloo to tell the communication layer "
        "from the program (auto: when the job used NCCL and the failure can come from the "
        "communication layer, or on a Gloo hang where TORCH_DISTRIBUTED_DEBUG=DETAIL can name "
        "the collective that differs; see docs/isolation.md).",
    ),
    _own(
        "isolate-timeout",
        type=FLOAT,
        default=defaults.ISOLATE_TIMEOUT_S,
        help="Cap, in seconds, on each isolation rerun (it stops sooner once past the "
        "point where the job failed).",
    ),
    _own(
        "isolate-single",
        flag=True,
        help="Also rerun with one rank: a distributed fault or a single-process one?",
    ),
    _own(
        "isolate-nccl",
        flag=True,
        help="Also rerun with NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_IB_DISABLE=1 in turn: "
        "which transport makes the failure go away?",
    ),
    _own(
        "on-verdict",
        default=None,
        metavar="CMD",
        help="Shell command run when an attempt or the job ends, the verdict in its "
        "environment (SAFELAUNCH_VERDICT, ...; docs/on-verdict.md). Never changes the exit code.",
    ),
    _own(
        "on-verdict-timeout",
        type=FLOAT,
        default=defaults.ON_VERDICT_TIMEOUT_S,
        help="Seconds before the --on-verdict command is killed with its process group.",
    ),
    _own(
        "metrics-port",
        type=INT,
        default=defaults.METRICS_PORT,
        help="Serve OpenMetrics on this port (0: off; needs safelaunch[metrics]; docs/metrics.md).",
    ),
    _own(
        "metrics-addr",
        default=None,
        help=f"Address --metrics-port binds [default: {defaults.METRICS_ADDR}].",
    ),
    _own(
        "color",
        choices=["auto", "always", "never"],
        default=defaults.COLOR,
        help="Colour rank prefixes (auto: on a terminal, unless NO_COLOR is set).",
    ),
)
OPTIONS = {spec.dest: spec for spec in LAUNCH_OPTIONS if spec.dest != "config"}
CONFIG = next(spec for spec in LAUNCH_OPTIONS if spec.dest == "config")


def launch_parser() -> Parser:
    """The launch's parser; the options' values are only those the command line gives."""
    parser = Parser(
        "safelaunch",
        # one line (a usage error prints it too); test_cli keeps it in step with cli.SUBCOMMANDS
        f"safelaunch [OPTIONS] {SCRIPT} [TRAINING_SCRIPT_ARGS]...  |  "
        "safelaunch {doctor,status,explain,lint} ... (each has --help)",
        "Launch TRAINING_SCRIPT on every rank, as torchrun does, and explain how it ended.",
        epilog="Check this machine: safelaunch doctor [--json]. "
        "See what a running job's ranks are doing: safelaunch status [--watch]. "
        "Explain an earlier run's logs: safelaunch explain PATH|-. Check a script for DDP "
        "mistakes: safelaunch lint SCRIPT [--json]. Exit codes: "
        "docs/exit-codes.md. Differences from torchrun: docs/compatibility.md.",
    )
    sections = {
        title: parser.add_argument_group(title) for title in (TORCHRUN_SECTION, OWN_SECTION)
    }
    for spec in LAUNCH_OPTIONS:
        shown = spec.shown_default
        text = f"{spec.help} [default: {shown}]" if shown is not None else spec.help
        kwargs: dict[str, Any] = {"dest": spec.dest, "help": text.replace("%", "%%")}
        if spec.flag:
            kwargs["action"] = "store_true"
        else:
            kwargs.update(type=spec.type, choices=spec.choices, metavar=spec.metavar)
        # SUPPRESS: an option not on the command line is absent, not its default: its
        # value may still come from the environment or --config (parse_launch).
        sections[spec.section].add_argument(*spec.names, default=argparse.SUPPRESS, **kwargs)
    own = sections[OWN_SECTION]
    own.add_argument(
        "--version",
        action="version",
        version=f"safelaunch, version {__version__}",
        help="Show the version and exit.",
    )
    parser.add_help_option(own)
    # The script and everything after it, even `--standalone`, as torchrun's
    # training_script + nargs=REMAINDER (one positional: see parse_launch for `--`).
    parser.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser
