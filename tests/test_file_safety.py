"""Files and other users: nothing safelaunch creates is written through a link another
user planted; a full disk leaves no empty temporary (issue 13). Run as root here: the
hostile directories are prepared as user `nobody`."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli, worker

from safelaunch import exitcodes
from safelaunch.preflight import ports
from safelaunch.rundir.writing import write_file

PRECIOUS = "root's own file\n"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    os.chmod(victim, 0o644)
    return victim


def _as_nobody(*paths: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    for path in paths:
        os.chown(path, nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="prepares files as another user")


@needs_root
def test_a_log_directory_another_user_prepared_is_refused(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    shared = tmp_path / "shared"  # the working directory, owned by nobody
    logs = shared / "safelaunch_logs"
    logs.mkdir(parents=True)
    (logs / "latest").symlink_to(victim)
    (logs / ".latest-x").symlink_to(victim)
    _as_nobody(shared, logs, logs / "latest", logs / ".latest-x")
    result = cli(tmp_path, "--log-dir", str(logs), worker("dump_env.py"))
    assert result.returncode == exitcodes.PREFLIGHT, result.stderr
    assert f"{shared} is owned by nobody (uid 65534), not by you or root" in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert victim.read_text() == PRECIOUS and not list((tmp_path / "pids").iterdir())
    assert sorted(p.name for p in logs.iterdir()) == [".latest-x", "latest"]


@needs_root
def test_a_world_writable_log_directory_is_refused_unless_sticky(tmp_path: Path) -> None:
    logs = tmp_path / "open"
    logs.mkdir()
    os.chmod(logs, 0o777)
    result = cli(tmp_path, "--log-dir", str(logs), worker("dump_env.py"))
    assert result.returncode == exitcodes.PREFLIGHT
    assert "can be written by other users" in result.stderr
    os.chmod(logs, 0o1777)  # like /tmp: others cannot replace what is ours
    assert cli(tmp_path, "--log-dir", str(logs), worker("dump_env.py")).returncode == 0


def test_a_device_as_the_log_directory_runs_with_console_output_only(tmp_path: Path) -> None:
    """/dev/null is writable by everyone, but nothing can be created below it: it was
    refused (78) as "can be written by other users"; now it runs as a plain file does."""
    result = cli(tmp_path, "--log-dir", os.devnull, worker("dump_env.py"))
    assert result.returncode == 0, result.stderr
    assert "other users" not in result.stderr
    assert f"cannot write logs under {os.devnull}/" in result.stderr


def test_the_port_lock_directory_is_never_used_through_a_link(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    target = tmp_path / "target"
    target.mkdir(mode=0o755)
    monkeypatch.setattr(ports, "LOCK_DIR", tmp_path / "locks")
    (tmp_path / "locks").symlink_to(target)  # planted where our lock directory goes
    reservation = ports.reserve_free_port()
    reservation.release()
    assert reservation.port > 0
    assert list(target.iterdir()) == [] and (target.stat().st_mode & 0o7777) == 0o755


def test_report_json_replaces_a_planted_link_and_never_writes_through_it(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    (tmp_path / "report.json").symlink_to(victim)
    assert write_file(tmp_path / "report.json", '{"ok": true}')
    assert victim.read_text() == PRECIOUS
    assert (tmp_path / "report.json").read_text() == '{"ok": true}'
    assert not (tmp_path / "report.json").is_symlink()


def test_a_full_disk_leaves_no_temporary_behind(tmp_path: Path) -> None:
    # RLIMIT_FSIZE makes the write fail part-way (EFBIG), as a full disk does (ENOSPC).
    code = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from safelaunch.rundir.writing import write_file\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))\n"
        "sys.exit(0 if not write_file(Path(sys.argv[1]) / 'report.json', 'x' * 4096) else 1)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=30)
    assert list(tmp_path.iterdir()) == []
