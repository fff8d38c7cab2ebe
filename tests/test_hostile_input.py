"""Hostile input: every value gets one line and a documented exit code, never exit 70,
a traceback or a hang, and nothing starts (issue 13).

The generator (tests/hostile.py) covers the command line, PET_* / SAFELAUNCH_* / SLURM
variables, CUDA_VISIBLE_DEVICES, --config and --signatures files and the GPU inventory
file, in-process (hostile.invoke); a few cases go through the real process.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import marked_env, safelaunch_cmd
from hostile import Case, case_strategy, run_case
from hypothesis import HealthCheck, given, settings

from safelaunch import exitcodes, values
from safelaunch.errors import ConfigError


@settings(
    max_examples=1000,
    deadline=None,
    derandomize=True,  # the same 1,000 cases on every CI run; bench/ explores further
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(case_strategy())
def test_generated_input_never_ends_in_an_internal_error(tmp_path_factory, case: Case) -> None:
    assert run_case(case, str(tmp_path_factory.getbasetemp())) is None


def _fifo(tmp_path: Path) -> str:
    path = tmp_path / "fifo.toml"
    os.mkfifo(path)
    return str(path)


def _file(tmp_path: Path, name: str, data: bytes) -> str:
    (tmp_path / name).write_bytes(data)
    return str(tmp_path / name)


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--master-port=70000"], {}, "out of range (0 to 65535)"),
        (["--nproc-per-node=٣"], {}, "is not a number of ranks"),
        (["--monitor-interval=nan"], {}, "is not a valid number"),
        ([b"--role=\xff"], {}, "--role is not valid UTF-8"),
        (["--master-addr=" + "a" * 300], {}, "is not a host name or IP address"),
        (["--signatures", "@fifo"], {}, "not a regular file"),  # a FIFO must not block
        (["--config", "@deep"], {}, "nested more than 16 levels deep"),
        ([], {"SAFELAUNCH_GPU_INVENTORY": "@deep_json"}, "nested more than 16 levels deep"),
        ([], {"PET_NPROC_PER_NODE": "100000"}, "out of range (1 to 1024)"),
        ([], {"SLURM_JOB_ID": "1", "SLURM_NNODES": "２"}, "is not a number"),
    ],
)
def test_bad_input_through_the_real_process(tmp_path: Path, args, env, needle: str) -> None:
    files = {
        "@fifo": lambda: _fifo(tmp_path),
        "@deep": lambda: _file(tmp_path, "deep.toml", b"a = " + b"[" * 3000 + b"]" * 3000),
        "@deep_json": lambda: _file(tmp_path, "deep.json", b"[" * 100000 + b"]" * 100000),
    }
    args = [files[a]() if a in files else a for a in args]
    env = {k: files[v]() if v in files else v for k, v in env.items()}
    run_env, _ = marked_env(tmp_path, env)
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    proc = subprocess.run(
        [*safelaunch_cmd("--log-dir", str(tmp_path / "logs")), *args, str(script)],
        cwd=tmp_path,
        env=run_env,
        capture_output=True,
        timeout=30,
    )
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode in (exitcodes.USAGE, exitcodes.PREFLIGHT), err
    assert needle in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) <= 3  # usage, error
    assert not (tmp_path / "logs").exists() and not list((tmp_path / "pids").iterdir())


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("node0.example.com", True),
        ("10.0.0.1", True),
        ("::1", True),
        ("bücher.example", True),
        ("a" * 64 + ".example", False),  # the resolver's 63-byte label limit
        ("bad..host", False),
        ("-x", False),
        ("a\x00b", False),
        ("\udcff", False),
        ("", False),
    ],
)
def test_host_names_the_resolver_takes(text: str, ok: bool) -> None:
    if ok:
        assert values.host("--master-addr", text) == text
    else:
        with pytest.raises(ConfigError):
            values.host("--master-addr", text)


@pytest.mark.parametrize("text", ["٣", "1_000", "0x10", "nan", "inf", "1e400", "", "1" * 19])
def test_numbers_are_ascii_and_finite(text: str) -> None:
    with pytest.raises(ConfigError):
        values.integer("--x", text)
    with pytest.raises(ConfigError):
        values.number("--x", text)
