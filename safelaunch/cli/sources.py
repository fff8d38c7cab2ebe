"""A launch option's value: the command line, else its environment variable (PET_<NAME>
for torchrun's options, SAFELAUNCH_<NAME> for ours), else --config FILE, else its default.

Whatever the source, a value goes through the option's own type, so it means the same
wherever it came from; and build_config learns which options the user gave.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from typing import Any

from safelaunch.cli.options import CONFIG, OPTIONS, SCRIPT, Spec, launch_parser
from safelaunch.cli.parser import UsageError
from safelaunch.userfiles import BadFile, load_toml

# How a flag reads from a variable or a --config file (PET_STANDALONE=1, strict = true):
# the words click took, kept so that no setting that worked before stops working.
_TRUTH = {"1": True, "yes": True, "true": True, "on": True, "t": True, "y": True}
_FALSEHOOD = {"0": False, "no": False, "false": False, "off": False, "f": False, "n": False}
BOOLEANS = {**_TRUTH, **_FALSEHOOD, "": False}


def parse_launch(
    args: Sequence[str], environ: Mapping[str, str]
) -> tuple[dict[str, Any], frozenset[str]]:
    """The launch's raw values for build_config, and the names the user gave explicitly
    (command line, environment variable or --config: SLURM's defaults yield to those)."""
    parser = launch_parser()
    given = vars(parser.parse(args))
    command = given.pop("command")
    # The first `--` is argparse's, as in torchrun: before the script it ends the options
    # (`safelaunch [OPTIONS] -- train.py`); right after the script, torchrun's positional
    # takes it too (`torchrun train.py -- --lr 1` gives the script `--lr 1`, on every
    # Python since 3.6). Any later `--` is the script's, and REMAINDER keeps it.
    if command[:1] == ["--"]:
        command = command[1:]
    elif command[1:2] == ["--"]:
        command = command[:1] + command[2:]
    if not command:
        parser.error(f"the following arguments are required: {SCRIPT}")
    try:
        raw, explicit = _resolve(given, environ)
    except UsageError as exc:
        parser.error(str(exc))
    raw["training_script"], raw["training_script_args"] = command[0], tuple(command[1:])
    explicit |= {"training_script"} | ({"training_script_args"} if command[1:] else set())
    return raw, frozenset(explicit)


def _resolve(given: dict[str, Any], environ: Mapping[str, str]) -> tuple[dict[str, Any], set[str]]:
    """Each option's value from the command line, its variable, --config, or its default."""
    config, origin = given.pop("config", None), ""
    variable = next((v for v in CONFIG.env if environ.get(v)), None)
    if config is None and variable is not None:
        config, origin = _convert(CONFIG, environ[variable], variable), f" (from {variable})"
    try:
        from_file = load_config(config) if config is not None else {}
    except UsageError as exc:
        raise UsageError(f"{exc}{origin}") from None
    raw: dict[str, Any] = {}
    explicit = set(given)
    for name, spec in OPTIONS.items():
        if name in given:
            raw[name] = given[name]
            continue
        # The first of its variables that is set and not empty (an empty one is unset).
        variable = next((v for v in spec.env if environ.get(v)), None)
        if variable is not None:
            raw[name] = _convert(spec, environ[variable], variable)
        elif name in from_file:
            raw[name] = _convert(spec, from_file[name], f"--config {_shown(config or '')}")
        else:
            raw[name] = spec.default
            continue
        explicit.add(name)
    return raw, explicit


def _convert(spec: Spec, text: str, origin: str) -> Any:
    """A value from a variable or --config through the option's own type, exactly as the
    same text on the command line."""
    try:
        if spec.flag:
            boolean = BOOLEANS.get(text.strip().lower())
            if boolean is None:
                words = ", ".join(sorted(word for word in BOOLEANS if word))
                raise argparse.ArgumentTypeError(
                    f"{text!r} is not a valid boolean; recognized: {words} or empty"
                )
            return boolean
        value = spec.type(text) if spec.type is not None else text
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"argument {'/'.join(spec.names)}: {exc} (from {origin})") from None
    if spec.choices is not None and value not in spec.choices:
        choose = ", ".join(repr(c) for c in spec.choices)
        raise UsageError(
            f"argument {'/'.join(spec.names)}: invalid choice: {value!r} (choose from "
            f"{choose}) (from {origin})"
        )
    return value


def _shown(path: str) -> str:
    """A path as an error shows it: one line, no terminal escapes."""
    return path if path.isprintable() else repr(path)


def load_config(path: str) -> dict[str, str]:
    """--config FILE: TOML whose keys are launch options; the command line and env still win.

    Each value is returned as the text the command line would give: the option's own type
    reads it (_convert)."""
    shown = _shown(path)
    try:
        data = load_toml(path)
    except BadFile as exc:
        raise UsageError(f"argument --config: {shown}: {exc}") from None
    settings = {}
    for key, setting in data.items():
        name = key.replace("-", "_")
        if name not in OPTIONS:
            raise UsageError(f"argument --config: {shown}: {key!r} is not a launch option")
        if isinstance(setting, float) and not math.isfinite(setting):
            raise UsageError(
                f"argument --config: {shown}: {key} = {setting} is not a finite number"
            )
        if not isinstance(setting, (str, int, float, bool)):
            raise UsageError(
                f"argument --config: {shown}: {key} must be a string, number or true/false, "
                f"not a TOML {type(setting).__name__}"
            )
        settings[name] = str(setting).lower() if isinstance(setting, bool) else str(setting)
    return settings
