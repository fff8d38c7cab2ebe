"""argparse, set up the way every safelaunch command parses.

Why argparse and not click: importing click took 15-18 ms of a ~190 ms 4-rank launch
(`python -X importtime -c "import click"`: ~20 ms; argparse: ~2 ms), and all of it is
paid before any rank can start. torchrun parses with argparse too, so its semantics
(abbreviated flags, `usage:` / `error:` lines, exit 2) are ours by construction.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from safelaunch import exitcodes

MAX_WIDTH = 100  # --help never wider, however wide the terminal


class UsageError(Exception):
    """A bad value found outside argparse (an environment variable, a --config file):
    reported as argparse reports its own, with exit 2."""


class HelpFormatter(argparse.HelpFormatter):
    """`--a-b, --a_b METAVAR` once per option (argparse repeats the metavar per name)."""

    def __init__(self, prog: str) -> None:
        import shutil  # ~3 ms with its compression modules; only --help and errors format

        columns = shutil.get_terminal_size().columns
        super().__init__(prog, max_help_position=34, width=max(min(columns, MAX_WIDTH) - 2, 50))

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:
            return super()._format_action_invocation(action)
        names = ", ".join(action.option_strings)
        if action.nargs == 0:
            return names
        return f"{names} {self._format_args(action, action.dest.upper())}"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors say which flag, with a hint, in two lines at most."""

    def __init__(self, prog: str, usage: str, description: str, epilog: str | None = None):
        super().__init__(
            prog=prog,
            usage=usage,
            description=description,
            epilog=epilog,
            add_help=False,  # added by the caller, in the section it belongs to
            formatter_class=HelpFormatter,
        )

    def add_help_option(self, group: argparse._ActionsContainer | None = None) -> None:
        (group or self).add_argument(
            "-h", "--help", action="help", help="Show this message and exit."
        )

    def parse(self, args: Sequence[str]) -> argparse.Namespace:
        """Parse `args`; an unknown option or a stray argument is a usage error."""
        namespace, extras = self.parse_known_args(list(args))
        if extras:
            self.error(self._unknown(extras))
        return namespace

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)  # `usage: PROG ...`, one line
        self.exit(exitcodes.USAGE, f"{self.prog}: error: {message}\n")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # `--opt=--`: argparse (3.11's, for one) strips the `--` out of an explicit value
        # and hands the option an empty list, past its type and choices (a crash in a
        # later stage, or the option silently unset). `--opt --` is refused with
        # "expected one argument": `--opt=--` means the same, on every Python.
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            raise argparse.ArgumentError(
                action, "expected one argument ('--' ends the options; it is not a value)"
            )
        return super()._get_values(action, arg_strings)

    def _get_option_tuples(self, option_string: str) -> list[Any]:
        # An abbreviation (--max-rest) stands for the one option it starts; both
        # spellings of a flag (--nproc-per-node, --nproc_per_node) are one option.
        # A prefix of several options matches none here: argparse would stop at it
        # while it sorts the training script's own arguments (`train.py --no`); before
        # the script it is reported as unknown, with what it could be (_unknown).
        matches = super()._get_option_tuples(option_string)
        return matches[:1] if len({id(match[0]) for match in matches}) == 1 else []

    def _unknown(self, extras: list[str]) -> str:
        """What is wrong with the first unknown argument, on one line (no text of the
        user's unescaped: a line break in it would make two)."""
        first = extras[0]
        if not first.startswith("-") or first == "-":
            shown = " ".join(e if e.isprintable() else repr(e) for e in extras)
            return f"unrecognized arguments: {shown}"
        name = first.split("=", 1)[0]
        candidates = [match[1] for match in super()._get_option_tuples(name)]
        if len(candidates) > 1:
            shown = name if name.isprintable() else repr(name)
            return f"ambiguous option: {shown} could match {', '.join(candidates)}"
        import difflib  # only on this path

        close = difflib.get_close_matches(name, list(self._option_string_actions))
        hint = ""
        if len(close) == 1:
            hint = f" Did you mean {close[0]!r}?"
        elif close:
            hint = f" Did you mean one of: {', '.join(repr(c) for c in close)}?"
        return f"No such option {name!r}.{hint}"
