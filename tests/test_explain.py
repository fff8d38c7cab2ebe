"""`safelaunch explain` on each log layout, torchrun's from a real torchrun run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import launch, line_of, marked_env, once_per_run, safelaunch_cmd, worker

SAMPLER = worker("bad_sampler.py")
VERDICT = "class: data/sampling (sampler-and-shuffle)"


def _explain(where: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        safelaunch_cmd("explain", where), input=stdin, capture_output=True, text=True, timeout=30
    )


@pytest.fixture(scope="module")
def torchrun_logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One real failing torchrun run: its log directory and its combined console output."""
    torchrun = Path(safelaunch_cmd()[0]).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed")
    return once_per_run(
        "torchrun_logs", tmp_path_factory, lambda: _torchrun_logs(torchrun, tmp_path_factory)
    )


def _torchrun_logs(torchrun: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("torchrun")
    env, _ = marked_env(work)
    console = subprocess.run(
        [
            str(torchrun),
            "--nproc-per-node=2",
            "--log-dir",
            str(work / "logs"),
            "--tee",
            "3",
            SAMPLER,
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    combined = work / "slurm-1234.out"
    combined.write_text(console.stdout + console.stderr)
    return work / "logs", combined


@pytest.mark.slow
def test_torchrun_log_directory(torchrun_logs: tuple[Path, Path]) -> None:
    result = _explain(str(torchrun_logs[0]))
    assert result.returncode == 0, result.stderr
    assert "torchrun (attempt_0, local ranks), 2 rank log(s)" in result.stdout
    assert "root cause: rank 1" in result.stdout and VERDICT in result.stdout
    assert f"at:    {SAMPLER}:{line_of(SAMPLER, 'shuffle=True)')} in <module>" in result.stdout


@pytest.mark.slow
def test_combined_log_ignores_torchruns_own_traceback(torchrun_logs: tuple[Path, Path]) -> None:
    result = _explain(str(torchrun_logs[1]))
    assert "combined log" in result.stdout
    assert "root cause: rank 1" in result.stdout and VERDICT in result.stdout
    assert "ChildFailedError" not in result.stdout  # the launcher's traceback is not a rank's


def test_safelaunch_run_directory(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=3", worker("fail_one.py"))
    assert run.returncode == 1
    result = _explain(str(tmp_path / "logs"))  # the log dir: follows `latest`
    assert "safelaunch (attempt_0), 3 rank log(s)" in result.stdout
    assert "root cause: rank 1" in result.stdout
    assert "error: RuntimeError: rank 1 cannot read shard 7" in result.stdout


def test_stdin_with_rank_prefixes_and_a_consequence() -> None:
    text = "\n".join(
        [
            "srun: starting",
            "[rank0]: RuntimeError: [pair.cc:553] Connection closed by peer [10.0.0.2]:50609.",
            "[rank1]: step 7 loss nan",
            "[rank1]: Traceback (most recent call last):",
            '[rank1]:   File "/home/u/train.py", line 40, in <module>',
            "[rank1]: RuntimeError: Expected to have finished reduction in the prior iteration",
        ]
    )
    result = _explain("-", stdin=text)
    assert "root cause: rank 1" in result.stdout
    assert "class: model/gradient (ddp-unused-parameters)" in result.stdout
    assert "at:    /home/u/train.py:40 in <module>" in result.stdout
    assert "rank 0: failed as a consequence (peer-connection-closed), not a cause" in result.stdout
    assert "note: rank 1 logged a non-finite loss: 'step 7 loss nan'" in result.stdout


def test_bad_path_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = _explain(str(tmp_path / "missing"))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "no such file or directory" in result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _explain(str(empty)).returncode == 2


def test_safelaunch_multi_node_prefix_names_the_rank_and_node() -> None:
    """A SLURM .out of a two-node job: `[node1/rank3]:` lines, width-padded ones too."""
    text = "\n".join(
        [
            "safelaunch: node 0 of 2 (gpu-a): ranks 0-1 of 4; every node checked alike",
            "safelaunch: node 1 of 2 (gpu-b): ranks 2-3 of 4; every node checked alike",
            "[node0/rank0]: step 0 loss 1.2",
            "[node1/rank 3]: [rank3]: Traceback (most recent call last):",
            '[node1/rank 3]: [rank3]:   File "/home/u/train.py", line 12, in <module>',
            "[node1/rank 3]: [rank3]: ZeroDivisionError: division by zero",
        ]
    )
    result = _explain("-", stdin=text)
    assert "combined log, 2 rank log(s)" in result.stdout
    assert "root cause: rank 3 on node 1 (gpu-b)" in result.stdout
    assert "error: ZeroDivisionError: division by zero" in result.stdout
    assert "at:    /home/u/train.py:12 in <module>" in result.stdout
