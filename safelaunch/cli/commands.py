"""The commands: a launch, and `explain`, `doctor`, `status`, `lint`.

Each command's body returns an exit code named in safelaunch/exitcodes.py and hands
itself to `finish`, the one place where errors become exit codes.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from safelaunch import __version__, defaults, exitcodes, values
from safelaunch.cli.options import Number, SectionedCommand, with_launch_options
from safelaunch.config import build_config
from safelaunch.console import Console, color_wanted
from safelaunch.errors import SafelaunchError

_HELP = {"help_option_names": ["-h", "--help"]}


def settled() -> None:
    """The imports are done: collect again, from here on, what the launcher makes later.

    safelaunch/entry.py pauses the collector while the CLI and the launch path import
    (creating their dataclasses set off ~35 young and ~3 middle collections, ~6 ms of a
    4-rank launch's CPU, that found little). gc.freeze keeps what the imports made out of
    every later collection, also in the keeper that the launch forks next (what Python's
    docs advise before a fork: its collections then never write to the shared heap).
    Where something else runs the commands (tests, in-process) the collector was never
    paused and this leaves it alone.
    """
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def finish(body: Callable[[], int], errors: Console, interrupted: str = "interrupted") -> NoReturn:
    """Run a command's body and exit with its code.

    A SafelaunchError is shown once, as one line on stderr, and exits with the code its
    type names; Ctrl-C exits 128 + SIGINT; any other exception is a bug in safelaunch
    (70, with the traceback). Click's own usage errors never reach here: click exits 2
    for them before a body runs.
    """
    try:
        code = body()
    except SafelaunchError as exc:
        errors.say(exc.render(), "error")
        code = exc.exit_code
    except KeyboardInterrupt:
        errors.say(interrupted)
        code = exitcodes.INTERRUPTED
    except Exception:
        import traceback  # only on this path: a bug in safelaunch

        errors.say(traceback.format_exc().rstrip(), "plain")
        errors.say("internal error: this is a bug in safelaunch; please report it", "error")
        code = exitcodes.INTERNAL
    sys.exit(code)


@click.command(
    cls=SectionedCommand,
    context_settings={
        **_HELP,
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
@with_launch_options
@click.version_option(__version__, "--version", prog_name="safelaunch")
@click.argument("training_script")
@click.argument("training_script_args", nargs=-1, type=click.UNPROCESSED)
def command(**raw: Any) -> None:
    """Launch TRAINING_SCRIPT on every rank, as torchrun does, and explain how it ended."""
    raw["color"] = color_wanted(raw["color"])
    console = Console(color=raw["color"])
    ctx = click.get_current_context()
    explicit = frozenset(
        name
        for name in raw
        if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
    )

    def launch() -> int:
        # Imported here: `--help` and usage errors should not pay for it.
        from safelaunch.launch import run

        settled()
        return run(build_config(raw, os.environ, explicit), console)

    finish(launch, console, "interrupted before any rank started")


@click.command(context_settings=_HELP)
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
    console = Console(color=color_wanted("auto", sys.stderr.buffer))

    def explain_logs() -> int:
        from safelaunch.diagnose.user_signatures import load
        from safelaunch.explain import explain

        console.emit((explain(where, load(signatures)) + "\n").encode())
        return exitcodes.SUCCESS

    finish(explain_logs, console)


@click.command(context_settings=_HELP)
@click.option(
    "--nproc-per-node",
    "--nproc_per_node",
    "nproc",
    type=Number(integer=True, low=1, high=values.MAX_NPROC),
    default=None,
    help="Ranks to check the GPU mapping for [default: one per visible GPU].",
)
@click.option("--master-addr", "--master_addr", "master_addr", default=None)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def doctor_command(nproc: int | None, master_addr: str | None, as_json: bool) -> None:
    """Run every preflight check without launching: GPUs and their mapping, torch / CUDA /
    NCCL, /dev/shm, limits, interfaces, addresses. Exit 78 when a check fails."""
    console = Console()

    def check() -> int:
        from safelaunch.doctor import doctor

        if master_addr:
            values.host("--master-addr", master_addr)
        text, code = doctor(nproc, master_addr, as_json)
        console.emit((text + "\n").encode())
        return code

    finish(check, console)


@click.command(context_settings=_HELP)
@click.option(
    "--log-dir",
    "--log_dir",
    "log_dir",
    envvar="PET_LOG_DIR",
    default=defaults.LOG_DIR,
    show_default=True,
    help="Where the runs are (the launch's --log-dir).",
)
@click.option("--watch", is_flag=True, help="Refresh until the job ends (Ctrl-C to stop).")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2),
    default=defaults.STATUS_INTERVAL_S,
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

    out = Console(color=color_wanted("auto", sys.stdout.buffer))

    def look() -> int:
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
        except KeyboardInterrupt:
            pass  # Ctrl-C is how a --watch ends
        return exitcodes.SUCCESS

    finish(look, Console(color=color_wanted("auto", sys.stderr.buffer)))


@click.command(context_settings=_HELP)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.argument("script", type=click.Path(dir_okay=False))
def lint_command(script: str, as_json: bool) -> None:
    """Check a training script for DDP mistakes without running it (Python's ast: nothing
    is imported). Exit 1 when an error or warning is found, 0 for hints or nothing."""

    def check() -> int:
        from safelaunch.lint.report import lint_report

        text, code = lint_report(script, as_json)
        Console().emit((text + "\n").encode())
        return code

    finish(check, Console(color=color_wanted("auto", sys.stderr.buffer)))
