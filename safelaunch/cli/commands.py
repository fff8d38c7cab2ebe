"""The commands: a launch, and `explain`, `doctor`, `status`, `lint`.

Each command's body returns an exit code named in safelaunch/exitcodes.py and hands
itself to `finish`, the one place where errors become exit codes.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from safelaunch import defaults, exitcodes
from safelaunch.cli.parser import Parser
from safelaunch.console import Console, Level, buffer_of, color_wanted
from safelaunch.early_stop import unwrapped_signal
from safelaunch.errors import SafelaunchError
from safelaunch.interpreter import settled
from safelaunch.vocab import Switch


def finish(body: Callable[[], int], errors: Console, interrupted: str = "interrupted") -> NoReturn:
    """Run a command's body and exit with its code.

    A SafelaunchError is shown once, as one line on stderr, and exits with the code its
    type names; Ctrl-C exits 128 + SIGINT; any other exception is a bug in safelaunch
    (70, with the traceback). Usage errors never reach here: the parser exits 2 for
    them before a body runs.
    """
    try:
        try:
            code = body()
        except Exception as exc:
            stop = unwrapped_signal(exc)
            if stop is None:
                raise
            raise stop from None  # a Ctrl-C or SIGTERM that Python wrapped: as itself
    except SafelaunchError as exc:
        errors.say(exc.render(), Level.ERROR)
        code = exc.exit_code
    except KeyboardInterrupt:
        errors.say(interrupted)
        code = exitcodes.INTERRUPTED
    except Exception:
        import traceback  # only on this path: a bug in safelaunch

        errors.say(traceback.format_exc().rstrip())
        errors.say("internal error: this is a bug in safelaunch; please report it", Level.ERROR)
        code = exitcodes.INTERNAL
    sys.exit(code)


def launch_command(args: Sequence[str]) -> NoReturn:
    """`safelaunch [OPTIONS] TRAINING_SCRIPT [TRAINING_SCRIPT_ARGS]...`: a launch."""
    # The launch's flags and config here, not at the top: a subcommand (`status`, called
    # again and again on a loaded node) pays for none of them.
    from safelaunch.cli.sources import parse_launch
    from safelaunch.config import build_config

    raw, explicit = parse_launch(args, os.environ)
    raw["color"] = color_wanted(Switch(raw["color"]))
    console = Console(color=raw["color"])

    def launch() -> int:
        # Imported here: `--help` and usage errors should not pay for it.
        from safelaunch.launch import run

        settled()
        return run(build_config(raw, os.environ, explicit), console)

    finish(launch, console, "interrupted before any rank started")


# Each subcommand's arguments (for its usage line) and what it does (its --help).
_SUBCOMMANDS = {
    "explain": (
        " PATH|-",
        "Explain a failed run from its logs: a safelaunch or torchrun log directory, or one "
        "combined log (a SLURM .out file with [rankN]: / [default0]: / srun --label prefixes); "
        "- reads stdin.",
    ),
    "doctor": (
        "",
        "Run every preflight check without launching: GPUs and their mapping, torch / CUDA / "
        "NCCL, /dev/shm, limits, interfaces, addresses. Exit 78 when a check fails.",
    ),
    "status": (
        " [RUN]",
        "What every rank of a job is doing now: state, step, collectives, time since its last "
        "progress, where it is in your code, CPU / memory / GPU memory. RUN: a run directory or "
        "run id (default: the latest run under --log-dir). Read-only, except --stacks.",
    ),
    "lint": (
        " SCRIPT",
        "Check a training script for DDP mistakes without running it (Python's ast: nothing "
        "is imported). Exit 1 when an error or warning is found, 0 for hints or nothing.",
    ),
}


def _parser(name: str) -> Parser:
    arguments, description = _SUBCOMMANDS[name]
    return Parser(f"safelaunch {name}", f"safelaunch {name} [OPTIONS]{arguments}", description)


def _torchrun_flag(parser: Parser, name: str, **kwargs: Any) -> None:
    """One of the launch's torchrun flags, in both its spellings (--log-dir, --log_dir)."""
    spelled = name.replace("-", "_")
    kwargs.setdefault("dest", spelled)
    parser.add_argument(
        f"--{name}", f"--{spelled}", metavar=kwargs.pop("metavar", "TEXT"), **kwargs
    )


def _json_option(parser: Parser) -> None:
    parser.add_argument(
        "--json", dest="as_json", action="store_true", help="Machine-readable output."
    )


def explain_command(args: Sequence[str]) -> NoReturn:
    """`safelaunch explain [OPTIONS] PATH|-`."""
    parser = _parser("explain")
    parser.add_argument(
        "--signatures", metavar="TEXT", help="TOML file of your own failure signatures."
    )
    parser.add_help_option()
    parser.add_argument("where", metavar="PATH|-", help=argparse.SUPPRESS)
    given = parser.parse(args)
    where: str = given.where
    signatures = given.signatures
    if signatures is None:  # SAFELAUNCH_SIGNATURES, as for a launch (an empty one is unset)
        signatures = os.environ.get("SAFELAUNCH_SIGNATURES") or None
    console = Console(color=color_wanted(Switch.AUTO, buffer_of(sys.stderr)))

    def explain_logs() -> int:
        from safelaunch.diagnose.user_signatures import load
        from safelaunch.explain import explain

        console.emit((explain(where, load(signatures)) + "\n").encode())
        return exitcodes.SUCCESS

    finish(explain_logs, console)


def doctor_command(args: Sequence[str]) -> NoReturn:
    """`safelaunch doctor [OPTIONS]`."""
    from safelaunch import values
    from safelaunch.cli.options import Number

    parser = _parser("doctor")
    _torchrun_flag(
        parser,
        "nproc-per-node",
        dest="nproc",
        type=Number(integer=True, low=1, high=values.MAX_NPROC),
        metavar="INTEGER",
        help="Ranks to check the GPU mapping for [default: one per visible GPU].",
    )
    _torchrun_flag(parser, "master-addr")
    _json_option(parser)
    parser.add_help_option()
    given = parser.parse(args)
    nproc: int | None = given.nproc
    master_addr: str | None = given.master_addr
    as_json: bool = given.as_json
    console = Console()

    def check() -> int:
        from safelaunch.doctor import doctor

        if master_addr:
            values.host("--master-addr", master_addr)
        text, code = doctor(nproc, master_addr, as_json)
        console.emit((text + "\n").encode())
        return code

    finish(check, console)


def _interval(text: str) -> float:
    """Seconds between `status --watch` refreshes: a float, at least 0.2."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid float") from None
    if seconds < 0.2:
        raise argparse.ArgumentTypeError(f"{seconds} is not in the range x>=0.2")
    return seconds


def status_command(args: Sequence[str]) -> NoReturn:
    """`safelaunch status [OPTIONS] [RUN]`."""
    parser = _parser("status")
    _torchrun_flag(
        parser,
        "log-dir",
        help=f"Where the runs are (the launch's --log-dir). [default: {defaults.LOG_DIR}]",
    )
    parser.add_argument(
        "--watch", action="store_true", help="Refresh until the job ends (Ctrl-C to stop)."
    )
    parser.add_argument(
        "--interval",
        type=_interval,
        default=defaults.STATUS_INTERVAL_S,
        metavar="FLOAT RANGE",
        help="Seconds between refreshes with --watch. "
        f"[default: {defaults.STATUS_INTERVAL_S}; x>=0.2]",
    )
    _json_option(parser)
    parser.add_argument(
        "--stacks",
        action="store_true",
        help="Also ask every rank on this host for a live dump of its threads (it runs on).",
    )
    parser.add_help_option()
    parser.add_argument("run", nargs="?", metavar="RUN", help=argparse.SUPPRESS)
    given = parser.parse(args)
    run: str | None = given.run
    log_dir: str = given.log_dir
    if log_dir is None:  # PET_LOG_DIR, as for a launch (an empty one is unset)
        log_dir = os.environ.get("PET_LOG_DIR") or defaults.LOG_DIR
    watch: bool = given.watch
    interval: float = given.interval
    as_json: bool = given.as_json
    stacks: bool = given.stacks
    from pathlib import Path

    from safelaunch import status

    out = Console(color=color_wanted(Switch.AUTO, buffer_of(sys.stdout)))

    def look() -> int:
        try:
            if watch and not stacks:
                status.watch(
                    run,
                    Path(log_dir),
                    interval=interval,
                    in_place=sys.stdout is not None and sys.stdout.isatty() and not as_json,
                    colour=out.color,
                    as_json_output=as_json,
                    emit=lambda text: out.emit(text.encode()),
                )
            else:
                text = status.show(
                    run, Path(log_dir), as_json_output=as_json, colour=out.color, stacks=stacks
                )
                out.emit((text + "\n").encode())
        except KeyboardInterrupt:
            pass  # Ctrl-C is how a --watch ends
        return exitcodes.SUCCESS

    finish(look, Console(color=color_wanted(Switch.AUTO, buffer_of(sys.stderr))))


def lint_command(args: Sequence[str]) -> NoReturn:
    """`safelaunch lint [OPTIONS] SCRIPT`."""
    from safelaunch.cli.options import a_script_file

    parser = _parser("lint")
    _json_option(parser)
    parser.add_help_option()
    parser.add_argument("script", type=a_script_file, metavar="SCRIPT", help=argparse.SUPPRESS)
    given = parser.parse(args)
    script: str = given.script
    as_json: bool = given.as_json

    def check() -> int:
        from safelaunch.lint.findings_text import lint_report

        text, code = lint_report(script, as_json)
        Console().emit((text + "\n").encode())
        return code

    finish(check, Console(color=color_wanted(Switch.AUTO, buffer_of(sys.stderr))))
