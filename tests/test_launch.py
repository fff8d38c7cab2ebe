"""Real launches: success, failures with the root cause's code, restarts, entry points."""

from __future__ import annotations

import json
import shutil
import stat
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import _communicate, _popen, console_lines, launch, line_of, marked_env, worker


def test_success_runs_every_rank_with_script_args_untouched(tmp_path: Path) -> None:
    args = ["a", "--standalone", "--", "--nproc_per_node=9", "-m"]
    run = launch(tmp_path, "--nproc_per_node=3", worker("dump_env.py"), *args)
    assert run.returncode == 0, run.stderr
    for rank in range(3):
        dumped = json.loads((tmp_path / "pids" / f"env{rank}.json").read_text())
        assert dumped["argv"] == [worker("dump_env.py"), *args]
        assert dumped["orig_argv"][:2] == [sys.executable, "-u"]
        assert dumped["env"]["RANK"] == str(rank)
        assert dumped["sid"] == dumped["pgid"] == dumped["pid"]  # its own session and group
    assert "all 3 ranks succeeded" in run.stderr
    assert (run.attempt(0) / "launcher.log").read_text().count("all 3 ranks succeeded") == 1


@pytest.mark.parametrize("spelling", ["--nproc_per_node=2", "--nproc-per-node=2"])
def test_both_flag_spellings(tmp_path: Path, spelling: str) -> None:
    run = launch(tmp_path, spelling, worker("dump_env.py"))
    assert run.returncode == 0
    assert sorted(p.name for p in (tmp_path / "pids").iterdir()) == ["env0.json", "env1.json"]


def test_pet_environment_fallback_and_flag_precedence(tmp_path: Path) -> None:
    run = launch(tmp_path, worker("dump_env.py"), env={"PET_NPROC_PER_NODE": "2"})
    assert run.returncode == 0
    assert len(list((tmp_path / "pids").iterdir())) == 2
    run = launch(
        tmp_path,
        "--nproc-per-node=1",
        worker("dump_env.py"),
        env={"PET_NPROC_PER_NODE": "3", "PET_MAX_RESTARTS": "4"},
    )
    dumped = json.loads((tmp_path / "pids" / "env0.json").read_text())
    assert dumped["env"]["WORLD_SIZE"] == "1"
    assert dumped["env"]["TORCHELASTIC_MAX_RESTARTS"] == "4"


def test_rank_raising_is_the_root_cause(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=3", worker("fail_one.py"))
    assert run.returncode == 1
    summary = run.stderr
    assert "FAILED: rank 1 exited with code 1" in summary
    assert "error: RuntimeError: rank 1 cannot read shard 7" in summary
    line = line_of(worker("fail_one.py"), "cannot read shard")
    assert f"at:    {worker('fail_one.py')}:{line} in load_batch" in summary
    assert "ranks 0,2: stopped by safelaunch (SIGTERM)" in summary
    assert "rank1.log" in summary
    # The bound is the feature: the others are stopped at once, not after their 60 s sleep
    # (30 s: margin for a loaded machine, still far from 60).
    assert run.wall < 30
    assert b"RuntimeError: rank 1 cannot read shard 7" in run.rank_log(1)


def test_exit_code_is_the_root_cause_ranks_own(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", worker("exit_code.py"), env={"EXIT_CODE": "7"})
    assert run.returncode == 7
    assert "rank 1 exited with code 7" in run.stderr


@pytest.mark.parametrize(
    ("sig", "code", "name"), [("KILL", 137, "SIGKILL"), ("SEGV", 139, "SIGSEGV")]
)
def test_rank_killed_by_signal(tmp_path: Path, sig: str, code: int, name: str) -> None:
    run = launch(tmp_path, "--nproc-per-node=3", worker("kill_self.py"), env={"SIG": sig})
    assert run.returncode == code
    assert f"rank 1 died of {name} (exit {code})" in run.stderr
    assert "ranks 0,2: stopped by safelaunch" in run.stderr


def test_error_file_from_record_is_preferred(tmp_path: Path) -> None:
    script = tmp_path / "recorded.py"
    script.write_text(
        "import os, sys, json\n"
        "json.dump({'message': {'message': 'ValueError: from the error file',"
        " 'extraInfo': {'py_callstack': 'Traceback (most recent call last):\\n"
        '  File "/x/train.py", line 9, in main\\nValueError: from the error file\\n\'}}},'
        " open(os.environ['TORCHELASTIC_ERROR_FILE'], 'w'))\n"
        "sys.exit(1)\n"
    )
    run = launch(tmp_path, str(script))
    assert run.returncode == 1
    assert "error: ValueError: from the error file" in run.stderr
    assert "at:    /x/train.py:9 in main" in run.stderr


def test_restarts_count_up_in_new_attempt_directories(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", "--max-restarts=3", worker("restart.py"))
    assert run.returncode == 0, run.stderr
    for attempt in range(3):
        assert f"attempt {attempt} max 3" in console_lines(run.stdout, 0)
        assert run.rank_log(0, attempt) == f"attempt {attempt} max 3\n".encode()
    assert not run.attempt(3).exists()
    assert "restart 2 of 3" in run.stderr
    report = json.loads((run.attempt(2) / "report.json").read_text())
    assert [a["status"] for a in report["attempts"]] == ["failed", "failed", "succeeded"]
    assert [a["exit_code"] for a in report["attempts"]] == [5, 5, 0]
    assert "succeeded in" in run.stderr and "(attempt 2)" in run.stderr


def test_restarts_exhausted_exit_with_last_root_cause(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", "--max-restarts=1", worker("restart.py"))
    assert run.returncode == 5
    assert run.attempt(1).is_dir() and not run.attempt(2).exists()


def test_module_and_run_path_and_no_python(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    shutil.copy(worker("dump_env.py"), package / "dump.py")
    (package / "__init__.py").write_text("")
    run = launch(tmp_path, "-m", "pkg.dump", "x")
    assert run.returncode == 0, run.stderr
    dumped = json.loads((tmp_path / "pids" / "env0.json").read_text())
    assert dumped["argv"] == [str(package / "dump.py"), "x"]  # as `python -m` sets it
    assert dumped["name"] == "__main__"
    assert dumped["path0"] == str(tmp_path)

    run = launch(tmp_path, "--run-path", worker("dump_env.py"), "y")
    assert run.returncode == 0, run.stderr
    dumped = json.loads((tmp_path / "pids" / "env0.json").read_text())
    assert dumped["argv"] == [worker("dump_env.py"), "y"]
    assert dumped["name"] == "__main__"
    assert dumped["path0"] == str(Path(worker("dump_env.py")).parent)

    tool = tmp_path / "tool.sh"
    tool.write_text('#!/bin/sh\necho "native rank $RANK args $*"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    run = launch(tmp_path, "--no-python", "--nproc-per-node=2", str(tool), "--flag")
    assert run.returncode == 0, run.stderr
    assert console_lines(run.stdout, 1) == ["native rank 1 args --flag"]


def test_pythonunbuffered_set_unless_user_set_it(tmp_path: Path) -> None:
    run = launch(tmp_path, worker("dump_env.py"), unset=("PYTHONUNBUFFERED",))
    dumped = json.loads((tmp_path / "pids" / "env0.json").read_text())
    assert dumped["env"]["PYTHONUNBUFFERED"] == "1"
    assert "PYTHONUNBUFFERED=1" in run.stderr.split("set for the ranks")[1]
    run = launch(
        tmp_path, worker("dump_env.py"), env={"PYTHONUNBUFFERED": "", "OMP_NUM_THREADS": "7"}
    )
    dumped = json.loads((tmp_path / "pids" / "env0.json").read_text())
    assert dumped["env"]["PYTHONUNBUFFERED"] == ""
    assert dumped["env"]["OMP_NUM_THREADS"] == "7"
    assert "PYTHONUNBUFFERED" not in run.stderr


def test_two_jobs_started_together_get_different_ports(tmp_path: Path) -> None:
    jobs = [tmp_path / "a", tmp_path / "b"]
    for job in jobs:
        job.mkdir()
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda job: launch(job, worker("dump_env.py")), jobs))
    assert [run.returncode for run in runs] == [0, 0]
    ports = {
        json.loads((job / "pids" / "env0.json").read_text())["env"]["MASTER_PORT"] for job in jobs
    }
    assert len(ports) == 2


def test_colour_only_when_asked_or_on_a_terminal(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc-per-node=2", "--color=always", worker("bad_utf8.py"))
    assert "\x1b[36m[rank0]:\x1b[0m ok \u00e9" in run.stdout
    assert b"\x1b" not in run.rank_log(0)  # files never get colour
    run = launch(tmp_path, "--nproc-per-node=2", worker("bad_utf8.py"))  # a pipe: no colour
    assert "\x1b" not in run.stdout + run.stderr


# The launcher with attempt.load_judging made to wait until both ranks have written their
# files: it only returns if the ranks were started before it was called.
JUDGING_AFTER_SPAWN = """
import os, pathlib, sys, time
import safelaunch.attempt as attempt
from safelaunch.entry import main

load = attempt.load_judging

def load_once_the_ranks_ran():
    files = [pathlib.Path(os.environ["PIDS_DIR"]) / f"env{rank}.json" for rank in (0, 1)]
    deadline = time.monotonic() + 30
    while not all(f.exists() for f in files) and time.monotonic() < deadline:
        time.sleep(0.01)
    print(f"judging loaded with {sum(f.exists() for f in files)} rank(s) run", file=sys.stderr)
    # measured launch costs kept off the path to the first spawn (OpenSSL, the idna codec)
    print("loaded:", sorted({"hashlib", "encodings.idna"} & set(sys.modules)), file=sys.stderr)
    load()

attempt.load_judging = load_once_the_ranks_ran
main()
"""


def test_the_ranks_start_before_the_launcher_loads_diagnosis(tmp_path: Path) -> None:
    """Launch cost: diagnosis and the report are imported while the ranks start."""
    env, mark = marked_env(tmp_path)
    argv = [sys.executable, "-c", JUDGING_AFTER_SPAWN, "--log-dir", str(tmp_path / "logs")]
    proc = _popen([*argv, "--nproc_per_node=2", worker("dump_env.py")], tmp_path, env)
    _, stderr = _communicate(proc, mark, 60)
    assert proc.returncode == 0, stderr
    assert b"judging loaded with 2 rank(s) run" in stderr
    assert b"loaded: []" in stderr
    assert b"all 2 ranks succeeded" in stderr
