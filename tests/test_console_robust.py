"""The console never costs the job: closed streams, a reader that never reads, UTF-8 kept whole.

Real launches where the launcher's terminal misbehaves, plus the pure pieces (where a
UTF-8 character ends, a message that must not wait for a full pipe).
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import assert_no_orphans, console_lines, launch, marked_env, safelaunch_cmd

from safelaunch.console import Console, Sending
from safelaunch.supervisor.lines import LineAssembler, char_boundary

F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
PAD = "y" * 60

LINES = f"""
import os
rank = os.environ["RANK"]
for i in range(int(os.environ.get("LINES", "300"))):
    os.write(1, f"r{{rank}} {{i:06d}} {PAD}\\n".encode())
"""


def _script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _expected(rank: int, count: int) -> list[str]:
    return [f"r{rank} {i:06d} {PAD}" for i in range(count)]


def _launch_closing(tmp_path: Path, which: str, script: str) -> tuple[int, bytes, Path]:
    """Launch with `which` (stdout/stderr) closed; the code, the other stream, the logs."""
    env, mark = marked_env(tmp_path, {"LINES": "300"})
    logs = tmp_path / "logs"
    argv = safelaunch_cmd("--log-dir", str(logs), "--nproc-per-node=2", script)
    redirect = ">&-" if which == "stdout" else "2>&-"
    proc = subprocess.Popen(
        ["/bin/sh", "-c", f'exec "$@" {redirect}', "sh", *argv],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE if which == "stderr" else subprocess.DEVNULL,
        stderr=subprocess.PIPE if which == "stdout" else subprocess.DEVNULL,
        start_new_session=True,
    )
    out, err = proc.communicate(timeout=90)
    assert_no_orphans(mark, within=2.0)
    return proc.returncode, out if which == "stderr" else err, logs


@pytest.mark.parametrize("which", ["stdout", "stderr"])
def test_closed_standard_stream_is_like_dev_null(tmp_path: Path, which: str) -> None:
    """`safelaunch ... >&-` / `2>&-`: the launch runs, exits 0, the logs have everything."""
    code, other, logs = _launch_closing(tmp_path, which, _script(tmp_path, "lines.py", LINES))
    assert code == 0, other[-2000:]
    assert b"Traceback" not in other
    attempt = (logs / "latest" / "attempt_0").resolve()
    for rank in range(2):
        assert (attempt / f"rank{rank}.log").read_text().splitlines() == _expected(rank, 300)
    launcher_log = (attempt / "launcher.log").read_text()
    assert f"{which} closed when the launcher started" in launcher_log
    assert "all 2 ranks succeeded" in launcher_log
    if which == "stdout":  # the launcher's own messages still reach stderr
        assert b"all 2 ranks succeeded" in other
    else:  # rank output still reaches stdout
        assert console_lines(other.decode(), 1) == _expected(1, 300)


TERMED = """
import os, signal, sys, time
rank = os.environ["RANK"]
def on_term(*_):
    with open(f"term_at_{rank}", "w") as f:
        f.write(repr(time.time()))
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
for i in range(3000):  # ~400 KB: far more than the pipe takes
    os.write(1, f"r{rank} line {i} ".encode() + b"z" * 100 + b"\\n")
open(f"ready_{rank}", "w").close()
time.sleep(60)
"""

# The principle is "a signal is honoured within a second"; the loop ticks every 0.1 s.
# Two more seconds of margin for a machine shared by several test runs. Before, the
# ranks got the signal only once someone read the pipe: never, in this test.
FORWARD_BOUND = 3.0


@pytest.mark.parametrize("which", ["stdout", "stderr"])
@pytest.mark.parametrize(
    ("command", "code"), [(["lint", "train.py"], 0), (["status"], 2), (["explain", "logs"], 2)]
)
def test_subcommands_run_with_a_closed_standard_stream(
    tmp_path: Path, which: str, command: list[str], code: int
) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "logs").mkdir()
    env, _ = marked_env(tmp_path)
    redirect = ">&-" if which == "stdout" else "2>&-"
    argv = [sys.executable, "-m", "safelaunch", *command]
    proc = subprocess.run(
        ["/bin/sh", "-c", f'exec "$@" {redirect}', "sh", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert b"Traceback" not in proc.stdout + proc.stderr
    assert proc.returncode == code, proc.stderr  # 2: no run to show or explain


def test_sigterm_reaches_ranks_while_nobody_reads_the_console(tmp_path: Path) -> None:
    """stdout and stderr on one pipe nobody reads (`2>&1 | (sleep 25; cat)`), then SIGTERM."""
    env, mark = marked_env(tmp_path)
    script = _script(tmp_path, "termed.py", TERMED)
    argv = safelaunch_cmd("--log-dir", str(tmp_path / "logs"), "--nproc-per-node=2", script)
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=write_end, stderr=write_end, start_new_session=True
    )
    os.close(write_end)
    drained = bytearray()
    reader = threading.Thread(target=lambda: drained.extend(_read_all(read_end)), daemon=True)
    try:
        ready = [tmp_path / f"ready_{rank}" for rank in range(2)]
        deadline = time.monotonic() + 60
        while not all(p.exists() for p in ready) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(p.exists() for p in ready), "the ranks never finished writing"
        time.sleep(0.5)  # the console writer is blocked on the full pipe by now
        sent = time.time()
        proc.send_signal(15)
        marks = [tmp_path / f"term_at_{rank}" for rank in range(2)]
        while not all(m.exists() for m in marks) and time.time() < sent + FORWARD_BOUND + 5:
            time.sleep(0.02)
        delays = [float(m.read_text()) - sent if m.exists() else None for m in marks]
    finally:
        reader.start()  # now the console drains, whatever happened
        code = proc.wait(timeout=60)
        reader.join(10)
    assert all(d is not None and d < FORWARD_BOUND for d in delays), delays
    assert code == 143
    assert b"received SIGTERM: forwarding it to every rank" in _launcher_log(tmp_path)
    assert_no_orphans(mark, within=2.0)


def _read_all(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as stream:
        return stream.read()


def _launcher_log(tmp_path: Path) -> bytes:
    return next((tmp_path / "logs").glob("*/attempt_0/launcher.log")).read_bytes()


UTF8 = """
import os, time
os.write(1, ("日本" * 100000 + "\\n").encode())  # 600 KB: the console shows it in pieces
half = "█".encode()
os.write(1, b"half: " + half[:1])
time.sleep(1.6)  # longer than PARTIAL_AFTER: the console shows the line so far
os.write(1, half[1:] + b" end\\n")
os.write(1, b"bad \\xff\\xfe end\\n")
"""


def test_multibyte_text_is_never_cut_inside_a_character(tmp_path: Path) -> None:
    run = launch(tmp_path, _script(tmp_path, "utf8.py", UTF8))
    assert run.returncode == 0, run.stderr[-2000:]
    shown = console_lines(run.stdout, 0)
    assert "".join(line for line in shown if line.startswith("日")) == "日本" * 100000
    assert [line for line in shown if "half" in line or "end" in line][:2] == [
        "half: ",
        "█ end",
    ]
    assert "bad \ufffd\ufffd end" in shown  # invalid bytes are still shown replaced
    assert sum(line.count("\ufffd") for line in shown) == 2
    expected = ("日本" * 100000 + "\nhalf: █ end\n").encode() + b"bad \xff\xfe end\n"
    assert run.rank_log(0) == expected  # the file: every byte as written


def test_fell_behind_count_is_exact(tmp_path: Path) -> None:
    """stdout a pipe read only after the launcher left: shown + counted == written."""
    count = 2000
    env, mark = marked_env(tmp_path, {"LINES": str(count)})
    argv = safelaunch_cmd(
        "--log-dir",
        str(tmp_path / "logs"),
        "--nproc-per-node=2",
        _script(tmp_path, "lines.py", LINES),
    )
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, F_SETPIPE_SZ, 16384)
    with open(tmp_path / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(
            argv, cwd=tmp_path, env=env, stdout=write_end, stderr=err, start_new_session=True
        )
    os.close(write_end)
    try:
        code = proc.wait(timeout=90)
    finally:
        os.set_blocking(read_end, False)
        shown = _read_available(read_end)
    assert code == 0
    stderr = (tmp_path / "stderr.txt").read_text()
    skipped = sum(int(n) for n in re.findall(r"fell behind: (\d+) line", stderr))
    intact = sum(
        len(set(console_lines(shown.decode(), rank)) & set(_expected(rank, count)))
        for rank in range(2)
    )
    assert skipped > 0, stderr
    assert intact + skipped == 2 * count, (intact, skipped)
    assert shown.endswith(b"\n")  # never a half line before the launcher's messages
    assert_no_orphans(mark, within=2.0)


def _read_available(fd: int) -> bytes:
    data = bytearray()
    try:
        while chunk := os.read(fd, 65536):
            data.extend(chunk)
    except BlockingIOError:
        pass
    os.close(fd)
    return bytes(data)


@pytest.mark.parametrize("code", [0, 3])
def test_no_log_path_named_where_no_logs_exist(tmp_path: Path, code: int) -> None:
    script = _script(tmp_path, "ends.py", f"import sys\nsys.exit({code})\n")
    run = launch(tmp_path, script, log_dir=Path("/proc/safelaunch-no-such-dir"))
    assert run.returncode == code, run.stderr[-2000:]
    assert "cannot write logs under" in run.stderr
    named = [line for line in run.stderr.splitlines() if "logs:" in line or "logs in" in line]
    assert named, run.stderr
    assert all("/proc/safelaunch-no-such-dir" not in line for line in named), named
    assert all("logs: none (they could not be written)" in line for line in named), named
    ours = [line for line in run.stderr.splitlines() if "cannot write" not in line]
    assert not any("rank0.log" in line for line in ours), ours


# --- the pure pieces -------------------------------------------------------------------

WIDE = "日".encode()  # 3 bytes
FOUR = "😀".encode()  # 4 bytes


@pytest.mark.parametrize(
    ("data", "cut"),
    [
        (b"", 0),
        (b"abc", 3),
        (b"a" + WIDE, 4),
        (b"a" + WIDE[:1], 1),
        (b"a" + WIDE[:2], 1),
        (b"a" + FOUR[:3], 1),
        (b"a" + FOUR, 5),
        (b"a\xff", 2),  # invalid: not held, shown replaced
        (b"a\x80\x80", 3),  # stray continuation bytes: not held
        (b"a\xc0", 2),  # never a valid lead byte
    ],
)
def test_char_boundary(data: bytes, cut: int) -> None:
    assert char_boundary(data) == cut


def test_quiet_partial_line_keeps_a_split_character_for_later() -> None:
    assembler = LineAssembler()
    assert assembler.feed(b"half: " + WIDE[:1]) == []
    assert assembler.flush(ended=False) == b"half: "
    assert assembler.feed(WIDE[1:] + b" end\n") == [WIDE + b" end"]
    assert assembler.feed(b"x" + WIDE[:2]) == []
    assert assembler.flush(ended=True) == b"x" + WIDE[:2]  # the stream ended: all of it


def test_message_does_not_wait_for_a_full_pipe_and_keeps_its_order() -> None:
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    with os.fdopen(write_end, "wb", buffering=0) as err:
        with pytest.raises(BlockingIOError):
            while True:
                os.write(write_end, b"#" * 65536)
        os.set_blocking(write_end, True)
        console = Console(out=err, err=err)
        started = time.monotonic()
        for n in range(50):
            console.say(f"message {n}")
        assert time.monotonic() - started < 0.5
        got = bytearray()
        reader = threading.Thread(target=lambda: got.extend(_read_all(read_end)))
        reader.start()
        from safelaunch.console import drain_messages

        drain_messages(5.0)
    reader.join(5)
    text = bytes(got).lstrip(b"#").decode()
    assert text == "".join(f"safelaunch: message {n}\n" for n in range(50))


def test_stopped_sending_counts_what_never_went_out() -> None:
    sending = Sending(b"a\nb\nc\n")
    assert sending.went(2)
    assert sending.stop() == 2
    assert not sending.went(2)


def test_console_without_standard_streams_drops_output() -> None:
    code = (
        "import sys; sys.stdout = None; sys.stderr = None\n"
        "from safelaunch.console import Console\n"
        "c = Console(); c.say('x'); c.emit(b'y\\n'); print('ok', file=sys.__stdout__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"ok\n"
