"""Bad input: one clear line, a non-zero exit code, no traceback, no rank started."""

from __future__ import annotations

import ast
import io
import socket
import subprocess
from pathlib import Path

import pytest
from conftest import cli, safelaunch_cmd, worker
from hostile import invoke

from safelaunch import exitcodes
from safelaunch.cli import (
    doctor_command,
    explain_command,
    launch_command,
    lint_command,
    status_command,
)
from safelaunch.cli.commands import finish
from safelaunch.console import Console
from safelaunch.errors import ConfigError, PreflightError


def _nothing_started(tmp_path: Path) -> bool:
    return not list((tmp_path / "pids").iterdir()) and not (tmp_path / "logs").exists()


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        # Not --nproc_per_nod: argparse takes that abbreviation of --nproc_per_node, as torchrun.
        (["--nproc_per_nodes=2"], exitcodes.USAGE, "No such option '--nproc_per_nodes'"),
        (["--nproc-per-node=zero"], exitcodes.USAGE, "is not a number of ranks"),
        (["--nproc-per-node=0"], exitcodes.USAGE, "must be at least 1"),
        (["--max-restarts=x"], exitcodes.USAGE, "'x' is not a valid integer"),
        (["--nnodes=1:4"], exitcodes.USAGE, "static needs a fixed node count"),
        (["--nnodes=3:1"], exitcodes.USAGE, "needs 0 < MIN <= MAX"),
        (["--node-rank=1"], exitcodes.USAGE, "a single-node job has node rank 0"),
        (["--nnodes=2", "--node-rank=2"], exitcodes.USAGE, "give each node a rank from 0 to 1"),
        (["--nnodes=2", "--rdzv-backend=c10d"], exitcodes.USAGE, "needs --rdzv-endpoint"),
        (["--nnodes=2", "--standalone"], exitcodes.USAGE, "--standalone is one node"),
        (["--rdzv-backend=etcd"], exitcodes.USAGE, "is not supported yet"),
        (["--redirects=5"], exitcodes.USAGE, "is not 0-3 or a list"),
        (["--tee=0:9"], exitcodes.USAGE, "is not 0-3 or a list"),
        (["--local-ranks-filter=a"], exitcodes.USAGE, "is not a list of local ranks"),
        (["--signals-to-handle=SIGNOPE"], exitcodes.USAGE, "is not a signal name"),
        (["--signals-to-handle=SIGKILL"], exitcodes.USAGE, "cannot be caught"),
        (["--monitor-interval=0"], exitcodes.USAGE, "must be positive"),
        (["-m", "--no-python"], exitcodes.USAGE, "cannot be used together"),
        (["--nproc-per-node=xpu"], exitcodes.USAGE, "not supported yet"),
    ],
)
def test_bad_flags(tmp_path: Path, args: list[str], code: int, needle: str) -> None:
    result = cli(tmp_path, *args, worker("dump_env.py"))
    assert result.returncode == code, result.stderr
    assert needle in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert _nothing_started(tmp_path)


def test_mistyped_flag_gets_a_hint(tmp_path: Path) -> None:
    result = cli(tmp_path, "--nproc_per_nodes=2", worker("dump_env.py"))
    assert result.returncode == exitcodes.USAGE
    assert "Did you mean" in result.stderr and "'--nproc_per_node'" in result.stderr


def test_error_is_one_line_with_the_fix(tmp_path: Path) -> None:
    result = cli(tmp_path, "missing_script.py")
    assert result.returncode == exitcodes.PREFLIGHT
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"safelaunch: error: training script 'missing_script.py' not found (working directory: "
        f"{tmp_path}); check the path, or pass -m for a module"
    ]
    assert _nothing_started(tmp_path)


def test_no_python_needs_an_executable(tmp_path: Path) -> None:
    result = cli(tmp_path, "--no-python", "./no-such-tool")
    assert result.returncode == exitcodes.PREFLIGHT
    assert "is not an executable file or a command on PATH" in result.stderr


def test_gpu_count_without_gpu_is_a_preflight_error(tmp_path: Path) -> None:
    result = cli(
        tmp_path, "--nproc-per-node=gpu", worker("dump_env.py"), env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert result.returncode == exitcodes.PREFLIGHT
    assert "no GPU is visible" in result.stderr and "--nproc-per-node=2" in result.stderr
    assert _nothing_started(tmp_path)


def test_cpu_and_auto_resolve_without_gpu(tmp_path: Path) -> None:
    result = cli(
        tmp_path, "--nproc-per-node=auto", worker("dump_env.py"), env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert result.returncode == 0, result.stderr
    assert "one per CPU" in result.stderr


def test_explicit_master_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli(tmp_path, f"--master-port={port}", worker("dump_env.py"))
    assert result.returncode == exitcodes.PREFLIGHT
    assert f"port {port} is already in use" in result.stderr
    assert _nothing_started(tmp_path)


def test_not_yet_meaningful_flags_are_said_not_ignored(tmp_path: Path) -> None:
    result = cli(
        tmp_path,
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=localhost:29400",
        "--numa-binding=node",
        "--logs-specs=x",
        "--event-log-handler=console",
        worker("dump_env.py"),
    )
    assert result.returncode == 0, result.stderr
    for flag in ("--rdzv-endpoint", "--numa-binding", "--logs-specs", "--event-log-handler"):
        assert f"note: {flag}" in result.stderr


def test_help_lists_torchrun_and_own_options_apart() -> None:
    result = subprocess.run(safelaunch_cmd("--help"), capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    torchrun_part, own_part = result.stdout.split("safelaunch options:")
    assert "--nproc-per-node, --nproc_per_node" in torchrun_part
    assert "--virtual-local-rank, --virtual_local_rank" in torchrun_part
    assert "--color" in own_part and "--color" not in torchrun_part


def test_the_usage_line_shows_every_subcommand() -> None:
    from safelaunch.cli import SUBCOMMANDS

    shown = subprocess.run(safelaunch_cmd("--help"), capture_output=True, text=True, timeout=30)
    usage = shown.stdout.splitlines()[0]
    assert usage.startswith("usage: safelaunch [OPTIONS] TRAINING_SCRIPT"), usage
    assert all(name in usage for name in SUBCOMMANDS), usage
    wrong = subprocess.run(safelaunch_cmd("--no-such"), capture_output=True, text=True, timeout=30)
    assert wrong.returncode == 2 and wrong.stderr.splitlines()[0] == usage  # still one line


def test_every_torchrun_flag_is_accepted(torchrun: str) -> None:
    """Compare with `torchrun --help` itself: no flag of its may be unknown to us."""
    theirs = subprocess.run([torchrun, "--help"], capture_output=True, text=True).stdout
    ours = subprocess.run(safelaunch_cmd("--help"), capture_output=True, text=True).stdout
    import re

    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z_-]+|-[a-z])\b", theirs)) - {"-h"}
    missing = sorted(f for f in flags if f not in ours)
    assert not missing


@pytest.mark.parametrize("profile", sorted(Path(__file__).parents[1].glob("configs/*.toml")))
def test_shipped_configs_load_and_launch(tmp_path: Path, profile: Path) -> None:
    result = cli(tmp_path, "--config", str(profile), worker("dump_env.py"))
    assert result.returncode == 0, result.stderr


def test_config_file_sets_options_and_the_command_line_wins(tmp_path: Path) -> None:
    config = tmp_path / "job.toml"
    config.write_text('nproc-per-node = "3"\ndebug_profile = "quiet"\n')
    result = cli(tmp_path, "--config", str(config), worker("dump_env.py"))
    assert result.returncode == 0 and "3 rank(s)" in result.stderr
    assert "(quiet profile" in result.stderr
    result = cli(tmp_path, "--config", str(config), "--nproc-per-node=1", worker("dump_env.py"))
    assert "1 rank(s)" in result.stderr
    config.write_text("nproc = 3\n")
    result = cli(tmp_path, "--config", str(config), worker("dump_env.py"))
    assert (
        result.returncode == exitcodes.USAGE and "'nproc' is not a launch option" in result.stderr
    )


def test_a_node_alone_gives_up_at_the_join_timeout(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = cli(
        tmp_path,
        "--nnodes=2",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
        "--rdzv-conf=timeout=2",
        worker("dump_env.py"),
    )
    assert result.returncode == exitcodes.NODE_LOST, result.stderr
    assert f"rendezvous (static at 127.0.0.1:{port}) failed" in result.stderr
    assert "1/2 clients joined" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list((tmp_path / "pids").iterdir())


@pytest.mark.parametrize(
    ("raised", "code", "stderr"),
    [
        (None, exitcodes.SUCCESS, ""),
        (ConfigError("--x=1 is bad", "use 2"), exitcodes.USAGE, "--x=1 is bad; use 2"),
        (PreflightError("no\nGPU"), exitcodes.PREFLIGHT, "no\\nGPU"),  # one line
        (KeyboardInterrupt(), exitcodes.INTERRUPTED, "interrupted"),
    ],
)
def test_finish_turns_the_outcome_into_one_exit_code(
    raised: BaseException | None, code: int, stderr: str
) -> None:
    def body() -> int:
        if raised is not None:
            raise raised
        return exitcodes.SUCCESS

    err = io.BytesIO()
    with pytest.raises(SystemExit) as exited:
        finish(body, Console(out=io.BytesIO(), err=err))
    assert exited.value.code == code
    shown = err.getvalue().decode()
    assert shown == (f"safelaunch: {'' if code == 130 else 'error: '}{stderr}\n" if stderr else "")


def test_finish_calls_any_other_exception_a_bug() -> None:
    def body() -> int:
        raise RuntimeError("boom")

    err = io.BytesIO()
    with pytest.raises(SystemExit) as exited:
        finish(body, Console(out=io.BytesIO(), err=err))
    assert exited.value.code == exitcodes.INTERNAL
    shown = err.getvalue().decode()
    assert "RuntimeError: boom" in shown and shown.count("internal error: this is a bug") == 1


@pytest.mark.parametrize(
    ("command", "args", "needle"),
    [
        (explain_command, ["{tmp}/missing"], "no such file or directory"),
        (lint_command, ["{tmp}/missing.py"], "lint: {tmp}/missing.py: No such file"),
        (doctor_command, ["--master-addr=bad..name"], "--master-addr"),
        (status_command, ["--log-dir={tmp}/none"], ""),
    ],
)
def test_subcommand_errors_are_shown_once_with_their_code(
    tmp_path: Path, command: object, args: list[str], needle: str
) -> None:
    argv = [a.format(tmp=tmp_path) for a in args]
    result = invoke(command, argv, catch_exceptions=False)  # type: ignore[arg-type]
    assert result.exit_code == exitcodes.USAGE
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("safelaunch: error: "), result.stderr
    assert needle.format(tmp=tmp_path) in lines[0]
    assert result.stdout == ""


def _valued_options() -> list[tuple[object, str]]:
    """Every option that takes a value, of every command (their own parsers' tables)."""
    from safelaunch.cli.options import LAUNCH_OPTIONS

    found: list[tuple[object, str]] = [
        (launch_command, name) for spec in LAUNCH_OPTIONS if not spec.flag for name in spec.names
    ]
    for command, names in (
        (explain_command, ["--signatures"]),
        (doctor_command, ["--nproc-per-node", "--master-addr"]),
        (status_command, ["--log-dir", "--interval"]),
    ):
        found += [(command, name) for name in names]
    return found


@pytest.mark.parametrize(
    ("command", "name"), _valued_options(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_double_dash_as_a_value_is_refused_like_a_missing_one(
    tmp_path: Path, command: object, name: str
) -> None:
    # argparse handed `--opt=--` an empty list: --isolate-timeout ended in exit 70,
    # --color, --signatures, --event-log-handler started as if unset
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    tails = {launch_command: [str(script)], explain_command: ["x"]}
    argv = [f"{name}=--", *tails.get(command, [])]  # type: ignore[call-overload]
    result = invoke(command, argv, env={"SAFELAUNCH_COLOR": "never"})  # type: ignore[arg-type]
    assert result.exit_code == exitcodes.USAGE, result.output
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "expected one argument" in errors[0], result.stderr
    assert result.exception is None and not (tmp_path / "logs").exists()


def test_only_the_cli_exits_and_never_with_a_bare_number() -> None:
    """One exit path: sys.exit is called in the CLI alone, and no code is a literal."""
    package = Path(__file__).parents[1] / "safelaunch"
    exits: dict[str, list[str]] = {}
    literal_codes = []
    for path in sorted(package.rglob("*.py")):
        where = str(path.relative_to(package))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "sys.exit":
                exits.setdefault(where, []).append(ast.unparse(node))
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                literal_codes += [
                    where for t in node.targets if ast.unparse(t).split(".")[-1] == "exit_code"
                ]
    assert exits == {
        "cli/commands.py": ["sys.exit(code)"],  # finish
        # Ctrl-C or SIGTERM before any rank started (entry.py's and the CLI's windows)
        "early_stop.py": ["sys.exit(exitcodes.for_signal(signum))"],
    }
    assert literal_codes == []
