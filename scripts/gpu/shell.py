"""GPU acceptance: the imperative shell. Commands with a hard timeout, the install, GPU detection.

Standard library only (it runs on the GPU machine's python before safelaunch is installed,
and must not import torch: the launcher never does, and neither does its check).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge import Gpu, Ran, parse_smi

KILL_GRACE = 10.0  # SIGTERM, then this long for safelaunch's own teardown, then SIGKILL
MIN_SETUPTOOLS = (68,)  # pyproject.toml's build requirement


def run(
    argv: list[str], *, env: dict[str, str], cwd: Path, timeout: float, stdin: Any = None
) -> Ran:
    """Run to completion or `timeout`; on timeout the whole process group goes (own session)."""
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # one killpg ends safelaunch and anything it left
    )
    try:
        output, _ = process.communicate(timeout=max(timeout, 1.0))
        rc: int | None = process.returncode
    except subprocess.TimeoutExpired:
        output = stop_group(process)
        rc = None
    text = output.decode(errors="replace")
    return Ran(rc=rc, output=text, seconds=time.monotonic() - started)


def stop_group(process: subprocess.Popen[bytes]) -> bytes:
    """SIGTERM the process group (safelaunch tears its ranks down), SIGKILL after a grace."""
    for signum, grace in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)
        try:
            output, _ = process.communicate(timeout=grace)
            return output or b""
        except subprocess.TimeoutExpired:
            continue
    return b""


def forced_cpu() -> str | None:
    """A reason to act as if there were no GPU (tests of the CPU path on any machine)."""
    return (
        "SAFELAUNCH_ACCEPTANCE_NO_GPU is set"
        if os.environ.get("SAFELAUNCH_ACCEPTANCE_NO_GPU")
        else None
    )


def detect_gpus() -> tuple[list[Gpu], str]:
    """The GPUs as nvidia-smi lists them (independent of safelaunch's NVML code), or why none."""
    forced = forced_cpu()
    if forced:
        return [], forced
    if not Path("/proc/driver/nvidia/version").exists():
        return [], "no NVIDIA driver (no /proc/driver/nvidia/version)"
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return [], "an NVIDIA driver but no nvidia-smi on PATH"
    try:
        result = subprocess.run(
            [smi, "--query-gpu=index,uuid,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"nvidia-smi failed: {exc}"
    gpus = parse_smi(result.stdout)
    if not gpus:
        return [], f"nvidia-smi lists no GPU: {result.stdout.strip() or result.stderr.strip()}"
    return gpus, f"{len(gpus)} GPU(s): " + ", ".join(f"{g.index} {g.name}" for g in gpus)


@dataclass(frozen=True, slots=True, kw_only=True)
class Install:
    """How safelaunch got into the machine's python, and where the checks import it from."""

    mode: str
    imported_from: str
    problem: str | None  # set when pip could not install it (the checks then use PYTHONPATH)
    seconds: float


def _setuptools(python: str) -> tuple[int, ...] | None:
    probe = "import setuptools; print(setuptools.__version__)"
    result = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
    found = re.match(r"(\d+)", result.stdout.strip())
    return (int(found[1]),) if result.returncode == 0 and found else None


def _imported_from(python: str, env: dict[str, str]) -> str | None:
    probe = "import safelaunch, safelaunch.rank.bootstrap; print(safelaunch.__file__)"
    result = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, cwd="/", env=env, timeout=60
    )
    return result.stdout.strip() if result.returncode == 0 else None


def install(python: str, repo: Path, scratch: Path) -> Install:
    """pip install from a copy of the tree, offline, without dependencies; else PYTHONPATH.

    --no-deps: the machine has psutil, nvidia-ml-py and filelock; python-hostlist
    is missing and is only imported inside SLURM. --no-build-isolation: no index to fetch
    setuptools from, so the machine's own must be new enough. A copy: pip builds in the
    source tree, and the working tree stays clean.
    """
    started = time.monotonic()
    source = scratch / "src"
    shutil.copytree(repo / "safelaunch", source / "safelaunch")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo / name, source / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    problem: str | None = None
    version = _setuptools(python)
    if version is None or version < MIN_SETUPTOOLS:
        shown = ".".join(map(str, version)) if version else "missing"
        problem = f"setuptools {shown} (need >= 68): pip cannot build it offline"
    else:
        flags = ["--no-deps", "--no-build-isolation", "--no-index", "--no-cache-dir"]
        argv = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *flags]
        result = run([*argv, str(source)], env=env, cwd=scratch, timeout=180)
        (scratch / "install.log").write_text(result.output)
        where = _imported_from(python, env) if result.rc == 0 else None
        if where is not None:
            mode = "pip install --no-deps --no-build-isolation --no-index"
            return Install(mode=mode, imported_from=where, problem=None, seconds=_since(started))
        problem = f"pip install failed (exit {result.rc}): {result.output.strip()[-200:]}"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(repo), os.environ.get("PYTHONPATH")) if p
    )
    where = _imported_from(python, dict(os.environ)) or "nowhere: safelaunch does not import"
    return Install(mode="PYTHONPATH", imported_from=where, problem=problem, seconds=_since(started))


def _since(started: float) -> float:
    return time.monotonic() - started


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON file, or None when it is absent or broken."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def python_version() -> str:
    return sys.version.split()[0]
