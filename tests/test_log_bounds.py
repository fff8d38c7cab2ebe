"""Logs never stall diagnosis: linear-time matching, bounded reads, no FIFO, no link out."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import safelaunch_cmd

from safelaunch.diagnose import reading
from safelaunch.diagnose.match import matches
from safelaunch.diagnose.reading import read_tail, walk
from safelaunch.diagnose.signatures import SIGNATURES
from safelaunch.diagnose.user_signatures import from_records
from safelaunch.errors import ConfigError

# The bound is the feature here: Python's re took minutes on these (quadratic or
# exponential backtracking); RE2 takes milliseconds. 10 s is a margin for a loaded CI.
BOUND_S = 10.0


def test_a_one_megabyte_line_is_matched_in_linear_time() -> None:
    table = (
        from_records(
            [{"id": "evil", "meaning": "m", "patterns": ["(a+)+$", "x.*y.*z"], "next_steps": []}],
            "test",
        )
        + SIGNATURES
    )
    lines = [
        "network addresses of " * 50000,
        "DataLoader worker (pid(s) " * 40000,
        "a" * 100000 + "b",
        "x " * 500000,
    ]
    started = time.monotonic()
    found = matches("\n".join(lines), None, table)
    assert time.monotonic() - started < BOUND_S
    assert [m.signature.id for m in found] == []  # none of them is a failure


def test_evidence_is_cut_around_the_hit() -> None:
    text = "x" * 1_000_000 + "Connection reset by peer" + "y" * 1_000_000
    (found,) = matches(text, None, SIGNATURES)
    assert "Connection reset by peer" in found.line and len(found.line) <= 400


def test_a_user_pattern_re2_cannot_run_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="not an RE2 regular expression"):
        from_records([{"id": "x", "meaning": "m", "patterns": ["(?=a)b"]}], "f.toml")


def test_a_traceback_between_a_huge_logs_head_and_tail_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank that failed early in a long SLURM .out: its traceback is kept; memory stays
    bounded (head, tail and windows only). Sizes scaled down by 1,000."""
    monkeypatch.setattr(reading, "COMBINED_HEAD", 16 << 10)
    monkeypatch.setattr(reading, "COMBINED_TAIL", 16 << 10)
    monkeypatch.setattr(reading, "SCAN_CHUNK", 7 << 10)  # marks cut by a chunk's end too
    monkeypatch.setattr(reading, "MIDDLE_WINDOW", 2 << 10)
    noise = "".join(f"[rank{r}]: step 7 loss 2.31 lr 0.0003\n" for r in range(16)) * 200
    crashes = [
        f"[rank{r}]: Traceback (most recent call last):\n[rank{r}]: ValueError: r{r}\n"
        for r in (3, 9)
    ]
    log = tmp_path / "slurm.out"
    log.write_text(noise + crashes[0] + noise * 3 + crashes[1] + noise * 2)
    text = reading.read_combined(log)
    assert text is not None
    assert "[rank3]: ValueError: r3" in text and "[rank9]: ValueError: r9" in text
    assert len(text) < 40 << 10 + 2 * (2 << 10) and log.stat().st_size > 500 << 10


def test_a_fifo_and_a_device_are_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "rank0.log")
    assert read_tail(tmp_path / "rank0.log") == ""  # returns at once: no writer needed
    assert read_tail(Path("/dev/zero")) == ""


def test_explain_stays_in_its_tree(tmp_path: Path) -> None:
    secret = tmp_path / "secret.log"
    secret.write_text("Traceback (most recent call last):\nRuntimeError: the secret\n")
    run = tmp_path / "logs"
    (run / "attempt_0").mkdir(parents=True)
    (run / "attempt_0" / "rank0.log").symlink_to(secret)  # a link out of the tree
    os.mkfifo(run / "attempt_0" / "rank1.log")  # a FIFO would block a reader forever
    (run / "attempt_0" / "rank2.log").write_text(
        "Traceback (most recent call last):\nRuntimeError: the real one\n"
    )
    (run / "latest").symlink_to(tmp_path)  # `latest` pointing out of the tree
    proc = subprocess.run(
        safelaunch_cmd("explain", str(run)), capture_output=True, text=True, timeout=60
    )
    assert "the secret" not in proc.stdout + proc.stderr
    assert "root cause: rank 2" in proc.stdout and "the real one" in proc.stdout
    assert "2 rank log(s)" in proc.stdout and "Traceback" not in proc.stderr


def test_the_walk_is_bounded(tmp_path: Path) -> None:
    deep = tmp_path
    for _ in range(20):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (tmp_path / "loop").symlink_to(tmp_path)  # never followed
    assert max(len(p.relative_to(tmp_path).parts) for p in walk(tmp_path)) == 8


def test_without_re2_the_launcher_still_diagnoses_a_failure(tmp_path: Path) -> None:
    """An image without google-re2's wheel (the GPU machines') still starts and diagnoses.

    The job runs with `re2` unimportable (a sitecustomize blocks it in the launcher): the
    summary still names the signature, and a 1 MB line is searched on its first 4 KiB.
    """
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['re2'] = None\n")
    script = tmp_path / "oom.py"
    script.write_text(
        "import sys\nprint('x ' * 500000)\n"
        "raise MemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')\n"
    )
    path = os.pathsep.join(filter(None, [str(blocker), os.environ.get("PYTHONPATH", "")]))
    env = dict(os.environ, PYTHONPATH=path, SAFELAUNCH_ISOLATE="never")
    probe = subprocess.run(
        [*safelaunch_cmd()[:1], "-c", "import safelaunch.diagnose.match as m; print(m.re2)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.stdout.strip() == "None", probe.stderr
    run = subprocess.run(
        safelaunch_cmd("--log-dir", str(tmp_path / "logs"), "--nproc-per-node=1", str(script)),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = "\n".join(
        line[:300]
        for line in (run.stdout + run.stderr).splitlines()
        if line.startswith("safelaunch")
    )
    assert run.returncode == 1, said
    assert "Traceback" not in run.stderr
    assert "class: resources" in said, said
