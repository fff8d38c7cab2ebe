""".ci/run and scripts/test.sh, run for real on a copy of the tree whose tools are stubs.

Each stub records its command line and exits as the test says, so what the scripts run,
in which order, and how they end is seen without a venv, a cluster or a test suite.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CHECKOUT

STUB = """#!/usr/bin/env bash
echo "{name} $*" >> "{calls}"
exit {code}
"""
TOOLS = {
    "scripts/gpu_acceptance.sh": "gpu_acceptance.sh",
    "scripts/ci/browser.sh": "browser.sh",
    "scripts/test.sh": "test.sh",
    "scripts/ci/slurm-cluster.sh": "slurm-cluster.sh",
    ".venv/bin/python": "python",
    ".venv/bin/ruff": "ruff",
    ".venv/bin/lint-imports": "lint-imports",
    ".venv/bin/mypy": "mypy",
}


def _tree(tmp_path: Path, script: str, codes: dict[str, int]) -> tuple[Path, Path]:
    """A copy of `script` among stubs; `codes`: a stub's name -> its exit status."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    calls = tmp_path / "calls"
    calls.touch()
    copy = tmp_path / "tree" / script
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(CHECKOUT / script, copy)
    for where, name in TOOLS.items():
        path = tmp_path / "tree" / where
        if path == copy:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(STUB.format(name=name, calls=calls, code=codes.get(name, 0)))
        path.chmod(0o755)
    return copy, calls


def _ci(
    tmp_path: Path, codes: dict[str, int], env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    script, calls = _tree(tmp_path, ".ci/run", codes)
    environ = {"PATH": "/usr/bin:/bin", **(env or {})}
    done = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=30, env=environ
    )
    return done, calls.read_text().splitlines()


def test_ci_runs_every_step_after_a_failure_and_fails_at_the_end(tmp_path: Path) -> None:
    done, calls = _ci(tmp_path, {"test.sh": 1, "mypy": 2, "slurm-cluster.sh": 3})
    assert [c.split()[0] for c in calls] == [
        "browser.sh",
        "test.sh",
        "slurm-cluster.sh",
        "ruff",
        "ruff",
        "lint-imports",
        "mypy",
    ]
    assert done.returncode == 1, done.stderr
    summary = done.stderr[done.stderr.index("CI FAILED") :]
    assert "2 step(s)" in summary and "tests" in summary and "mypy" in summary
    assert "ruff" not in summary
    assert "SLURM GROUP NOT RUN" in done.stderr  # exit 3: no cluster, not a failure


def test_ci_runs_the_slurm_group_where_a_cluster_starts(tmp_path: Path) -> None:
    done, calls = _ci(tmp_path, {})
    assert done.returncode == 0, done.stderr
    assert calls[1:4] == ["test.sh ", "slurm-cluster.sh start", "test.sh --slurm"], calls
    assert "slurm-cluster.sh stop" in calls and "every step passed" in done.stderr


def test_ci_counts_a_broken_cluster_start_and_a_required_group(tmp_path: Path) -> None:
    done, calls = _ci(tmp_path, {"slurm-cluster.sh": 5})
    assert done.returncode == 1 and "slurm cluster start (exit 5)" in done.stderr
    assert calls[-1].startswith("mypy")  # and the rest still ran
    required, _ = _ci(tmp_path / "required", {"slurm-cluster.sh": 3}, {"SLURM_REQUIRED": "1"})
    assert required.returncode == 1 and "SLURM_REQUIRED=1" in required.stderr


def _test_sh(tmp_path: Path, *args: str) -> list[str]:
    """What scripts/test.sh hands pytest; python3 is a stub that makes a stub venv."""
    script, calls = _tree(tmp_path, "scripts/test.sh", {})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    venv = script.parents[1] / ".venv" / "bin"
    python3 = f"""#!/usr/bin/env bash
mkdir -p "{venv}"
for tool in pip python; do
    printf '#!/usr/bin/env bash\\necho "%s $*" >> "{calls}"\\n' "$tool" > "{venv}/$tool"
    chmod +x "{venv}/$tool"
done
"""
    (bin_dir / "python3").write_text(python3)
    (bin_dir / "python3").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(["bash", str(script), *args], check=True, timeout=30, env=env)
    return [c for c in calls.read_text().splitlines() if c.startswith("python ")]


def test_test_sh_runs_all_but_the_slurm_group_unless_asked(tmp_path: Path) -> None:
    assert _test_sh(tmp_path / "plain") == ["python -m pytest -n 2 -m not slurm"]
    assert _test_sh(tmp_path / "args", "tests/test_cli.py") == [
        "python -m pytest -n 2 -m not slurm tests/test_cli.py"
    ]
    assert _test_sh(tmp_path / "slurm", "--slurm") == [
        "python -m pytest -m slurm tests/test_slurm.py"
    ]


def test_make_bench_runs_only_entry_points(tmp_path: Path) -> None:
    """Each bench script `make bench` runs takes no argument it needs (`--help` works)."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    dry = subprocess.run(
        [make, "-n", "-C", str(CHECKOUT), "bench"],
        capture_output=True,
        text=True,
        check=True,
    )
    scripts = re.findall(r"\bbench/\w+\.py\b", dry.stdout)
    assert len(scripts) >= 3, dry.stdout
    for script in scripts:
        shown = subprocess.run(
            [sys.executable, str(CHECKOUT / script), "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0 and "usage:" in shown.stdout, (script, shown.stderr[-500:])
