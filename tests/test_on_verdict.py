"""--on-verdict CMD on real launches: every ending tells it; it never changes the exit code,
never outlives its bound, and leaves no process behind (launch() checks for orphans)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import assert_no_orphans, launch, start, wait_for, worker

from safelaunch import on_verdict
from safelaunch.on_verdict import HookEvent, Verdict, hook_env, verdict_line

DOCS = Path(__file__).parents[1] / "docs" / "on-verdict.md"
# One line per call, in a file beside the job: event|status|code|report|verdict
RECORD = (
    'printf "%s|%s|%s|%s|%s\\n" "$SAFELAUNCH_EVENT" "$SAFELAUNCH_STATUS" '
    '"$SAFELAUNCH_EXIT_CODE" "$SAFELAUNCH_REPORT" "$SAFELAUNCH_VERDICT" >> "$PIDS_DIR/calls"; '
    "echo hook-output-here"
)


def _calls(tmp_path: Path) -> list[list[str]]:
    text = (tmp_path / "pids" / "calls").read_text()
    return [line.split("|", 4) for line in text.splitlines()]


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "job.py"
    path.write_text(body)
    return str(path)


FAIL = "import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n"
HANG = "import time\nprint('ready', flush=True)\ntime.sleep(60)\n"
ENDINGS = {  # status: flags, script, exit code, the verdict's first word
    "succeeded": ([], "import os\n", 0, "all 2 ranks"),
    "failed": ([], FAIL, 3, "FAILED"),
    "hung": (["--hang-timeout=1.5"], HANG, 124, "HUNG"),
}


@pytest.mark.parametrize("status", sorted(ENDINGS))
def test_each_ending_tells_the_hook_its_verdict_status_code_and_report(
    tmp_path: Path, status: str
) -> None:
    flags, body, code, first = ENDINGS[status]
    run = launch(
        tmp_path, "--nproc-per-node=2", *flags, "--on-verdict", RECORD, _script(tmp_path, body)
    )
    assert run.returncode == code, run.stderr
    [(event, told, exit_code, report, verdict)] = _calls(tmp_path)
    assert (event, told, exit_code) == ("job", status, str(code))
    assert json.loads(Path(report).read_text())["status"] == status
    assert verdict.startswith(first)
    # its output went to the launcher's log, not to the console
    assert "hook-output-here" not in run.stdout + run.stderr
    assert "hook-output-here" in (run.attempt(0) / "launcher.log").read_text()


def test_an_attempt_that_is_restarted_tells_the_hook_then_the_job_does(tmp_path: Path) -> None:
    run = launch(
        tmp_path,
        "--nproc-per-node=2",
        "--max-restarts=1",
        "--on-verdict",
        RECORD,
        worker("restart.py"),
        env={"SUCCEED_AT": "1"},
    )
    assert run.returncode == 0, run.stderr
    calls = _calls(tmp_path)
    assert [c[:3] for c in calls] == [["attempt", "failed", "5"], ["job", "succeeded", "0"]]
    assert calls[0][3].endswith("attempt_0/report.json")
    assert calls[1][3].endswith("attempt_1/report.json")


def test_ctrl_c_tells_the_hook_interrupted_and_130(tmp_path: Path) -> None:
    proc, mark = start(tmp_path, "--nproc-per-node=2", "--on-verdict", RECORD, worker("sleeper.py"))
    wait_for(lambda: len(list((tmp_path / "pids").glob("rank*"))) == 2, 30, "both ranks")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    [(event, status, code, _, verdict)] = _calls(tmp_path)
    assert (event, status, code) == ("job", "interrupted", "130")
    assert verdict.startswith("interrupted by SIGINT")
    assert_no_orphans(mark, within=3.0)


def test_a_hook_that_hangs_is_killed_at_its_bound_and_the_code_stays(tmp_path: Path) -> None:
    script = _script(tmp_path, FAIL)
    started = time.monotonic()
    run = launch(
        tmp_path,
        "--nproc-per-node=2",
        "--on-verdict",
        "sleep 60",
        "--on-verdict-timeout=1",
        script,
    )
    assert run.returncode == 3
    assert time.monotonic() - started < 30  # not the hook's 60 s
    assert "--on-verdict command still running after 1." in run.stderr
    assert "killed with its process group (its output: " in run.stderr
    assert "the job's exit code is unchanged" in run.stderr


def test_a_hook_that_fails_changes_nothing_and_config_files_set_it(tmp_path: Path) -> None:
    config = tmp_path / "launch.toml"
    config.write_text('on_verdict = "echo broken >&2; exit 7"\n')
    run = launch(tmp_path, "--config", str(config), _script(tmp_path, "pass\n"))
    assert run.returncode == 0, run.stderr
    assert "--on-verdict command exited 7 after" in run.stderr
    assert "broken" in (run.attempt(0) / "launcher.log").read_text()


def test_a_grandchild_the_hook_leaves_behind_is_ended(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    hook = f"sleep 60 & echo $! > {pid_file}; exit 0"  # the hook itself exits at once
    run = launch(tmp_path, "--on-verdict", hook, _script(tmp_path, "pass\n"))
    assert run.returncode == 0, run.stderr
    assert "--on-verdict" not in run.stderr  # it succeeded: nothing said
    grandchild = int(pid_file.read_text())
    # launch() found no process of the job's left; and this one is not even a zombie
    assert not os.path.exists(f"/proc/{grandchild}") or _zombie(grandchild)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_hooks_environment_names_are_documented() -> None:
    documented = DOCS.read_text()
    verdict = Verdict(
        event=HookEvent.JOB,
        line="x",
        status="failed",
        exit_code=3,
        report=None,
        attempt=0,
        run_id="r",
        run_dir=Path("/r"),
    )
    env = hook_env({"SAFELAUNCH_STATUS": "stale", "PATH": "/bin"}, verdict)
    assert env["SAFELAUNCH_STATUS"] == "failed" and env["PATH"] == "/bin"  # ours win
    assert env[on_verdict.REPORT] == ""
    for name in on_verdict.NAMES:
        assert name in env and f"`{name}`" in documented


@pytest.mark.parametrize(
    ("head", "error", "expected"),
    [
        ("FAILED: rank 1", None, "FAILED: rank 1"),
        ("FAILED: rank 1", "ValueError: a\nb", "FAILED: rank 1: ValueError: a b"),
        ("HUNG: x", "y" * 1000, "HUNG: x: " + "y" * (on_verdict.MAX_VERDICT - 12) + "..."),
    ],
)
def test_the_verdict_is_one_bounded_line(head: str, error: str | None, expected: str) -> None:
    line = verdict_line(head, error)
    assert line == expected and "\n" not in line and len(line) <= on_verdict.MAX_VERDICT
