"""Helpers for tests that run the real `safelaunch` on tiny worker scripts."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import leaks
import pytest
from leaks import MARK_VAR

WORKERS = Path(__file__).parent / "workers"
# The repository's root, wherever it was cloned (a directory named "safelaunch", often).
CHECKOUT = Path(__file__).resolve().parents[1]
# Every mark of this pytest run starts with it, so that the reaper can find them all.
# A pytest run by a test (test_leaks.py) is handed its prefix.
SESSION = os.environ.get("SAFELAUNCH_TEST_SESSION") or uuid.uuid4().hex[:12]
# The marks handed out, the sessions of the launchers started and the directories they
# ran from, since the last sweep.
_marks: set[str] = set()
_sessions: set[int] = set()
_dirs: set[Path] = set()

# A suite started in the background (`.ci/run &`, nohup, a CI runner) inherits SIGINT
# ignored, and so does every launcher it starts: Python then keeps it ignored, the CLI
# rightly leaves it so (a backgrounded launch is not Ctrl-C'd), and the Ctrl-C tests
# send a signal nobody receives (exit 78 instead of 130, a run to its timeout). The
# launchers here stand for one started at a terminal: a handled SIGINT becomes SIG_DFL
# across exec, so Python installs its KeyboardInterrupt handler in them.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    log_dir: Path
    mark: str
    wall: float

    @property
    def run_dir(self) -> Path:
        return (self.log_dir / "latest").resolve()

    def attempt(self, n: int = 0) -> Path:
        return self.run_dir / f"attempt_{n}"

    def rank_log(self, rank: int, attempt: int = 0) -> bytes:
        return (self.attempt(attempt) / f"rank{rank}.log").read_bytes()


def safelaunch_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "safelaunch", *args]


def marked_env(
    tmp_path: Path, extra: dict[str, str] | None = None, unset: tuple[str, ...] = ()
) -> tuple[dict[str, str], str]:
    """The environment for a launch, carrying a mark every descendant inherits."""
    mark = f"{SESSION}-{uuid.uuid4().hex}"
    _marks.add(mark)
    _dirs.add(tmp_path)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PET_", "SAFELAUNCH_")) and k not in unset
    }
    env.update({MARK_VAR: mark, "SAFELAUNCH_COLOR": "never", "PIDS_DIR": str(tmp_path / "pids")})
    # Isolation reruns are tested in test_isolation.py; elsewhere they would only add time.
    env["SAFELAUNCH_ISOLATE"] = "never"
    # lint results are cached by content: keep the tests' cache out of the user's home
    env["SAFELAUNCH_CACHE_DIR"] = str(tmp_path / "lint-cache")
    (tmp_path / "pids").mkdir(exist_ok=True)
    env.update(extra or {})
    return env, mark


def launch(
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 90,
    log_dir: Path | None = None,
    unset: tuple[str, ...] = (),
) -> Run:
    """Run safelaunch to completion; assert afterwards that it left no process behind."""
    run_env, mark = marked_env(tmp_path, env, unset)
    logs = log_dir or tmp_path / "logs"
    started = time.monotonic()
    proc = _popen(safelaunch_cmd("--log-dir", str(logs), *args), tmp_path, run_env)
    stdout, stderr = _communicate(proc, mark, timeout)
    wall = time.monotonic() - started
    result = Run(
        returncode=proc.returncode,
        stdout=stdout.decode("utf-8", "replace"),
        stderr=stderr.decode("utf-8", "replace"),
        log_dir=logs,
        mark=mark,
        wall=wall,
    )
    assert_no_orphans(mark, within=2.0)
    return result


def start(
    where: Path, *args: str, env: dict[str, str] | None = None, text: bool = False
) -> tuple[subprocess.Popen, str]:
    """Start safelaunch in the background (logs under where/logs); the process and its mark."""
    run_env, mark = marked_env(where, env)
    return _popen(
        safelaunch_cmd("--log-dir", str(where / "logs"), *args), where, run_env, text
    ), mark


def cli(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run safelaunch (logs under tmp_path/logs) and capture its text output; no orphan check."""
    run_env, mark = marked_env(tmp_path, env)
    proc = _popen(
        safelaunch_cmd("--log-dir", str(tmp_path / "logs"), *args), tmp_path, run_env, True
    )
    stdout, stderr = _communicate(proc, mark, timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _popen(argv: list[str], cwd: Path, env: dict[str, str], text: bool = False) -> subprocess.Popen:  # type: ignore[type-arg]
    # A session of its own, known to the sweep: what the launcher starts without one
    # (probes, the keeper before its setsid) is ended with it, and a Ctrl-C at the
    # terminal reaches pytest only (the sweep ends the launcher either way).
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=text,
        start_new_session=True,
    )
    _sessions.add(proc.pid)
    return proc


def _communicate(proc: subprocess.Popen, mark: str, timeout: float):  # type: ignore[no-untyped-def,type-arg]
    """proc.communicate(); when interrupted (a timeout, pytest-timeout, Ctrl-C), first sweep.

    subprocess.run would SIGKILL the launcher at once; its ranks then die with it, and a
    descendant that cleared its environment could no longer be found by their session.
    """
    try:
        return proc.communicate(timeout=timeout)
    except BaseException:
        leaks.sweep(leaks.exact([mark]), {proc.pid})
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=5)  # a stray that left the session may hold the pipes
        raise


def marked_processes(mark: str) -> set[int]:
    """Live (non-zombie) processes whose environment carries the test's mark."""
    needle = f"{MARK_VAR}={mark}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and stat[stat.rfind(b")") + 2 :][:1] != b"Z":
            found.add(int(entry.name))
    return found


def assert_no_orphans(mark: str, within: float) -> None:
    deadline = time.monotonic() + within
    while True:
        left = marked_processes(mark)
        if not left:
            return
        if time.monotonic() > deadline:
            details = {pid: _cmdline(pid) for pid in left}
            for pid in left:  # do not leak into the next test
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)
            pytest.fail(f"orphans left behind: {details}")
        time.sleep(0.05)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "?"


def line_of(path: str, text: str) -> int:
    """1-based number of the first line of `path` containing `text`."""
    lines = Path(path).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def without_paths(text: str, *also: Path) -> str:
    """`text` with the checkout's path (and each of `also`) written as <checkout> (<path>).

    A test that greps output for a path fragment ("safelaunch/" for a traceback through the
    launcher's own code) must not find it in the name of the directory the repository was
    cloned into: `git clone` names it safelaunch. The package's own files still show as
    "<checkout>/safelaunch/...".
    """
    for path, name in [(CHECKOUT, "<checkout>"), *((p, "<path>") for p in also)]:
        for form in {str(path.resolve()), str(path.absolute())}:
            text = text.replace(form, name)
    return text


def worker(name: str) -> str:
    return str(WORKERS / name)


def console_lines(text: str, rank: int) -> list[str]:
    prefix = f"[rank{rank}]: "
    return [line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix)]


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test() -> Iterator[None]:
    """End whatever the test started, even when it failed or pytest-timeout stopped it.

    pytest-timeout uses method "signal" (pyproject.toml): the timeout raises inside the
    test and this teardown still runs. Its "thread" method ends pytest with os._exit,
    with no teardown at all; then only the session's reaper (leaks.py) is left to sweep.
    Fixtures of a wider scope are set up before this one: what they started is theirs
    and is swept at the end of the session.
    """
    _wider_marks.update(_marks)
    _wider_sessions.update(_sessions)
    _wider_dirs.update(_dirs)
    _marks.clear()
    _sessions.clear()
    _dirs.clear()
    yield
    _sweep(_marks, _sessions, _dirs)


def _sweep(marks: set[str], sessions: set[int], dirs: set[Path]) -> None:
    if marks or sessions:
        leaks.sweep(leaks.exact(marks), sessions)
    _remove_private_dirs(dirs)
    marks.clear()
    sessions.clear()
    dirs.clear()


def _remove_private_dirs(dirs: set[Path]) -> None:
    """The private directories (launch.new_run: <tmp>/safelaunch-<run id>-*) of launchers
    that a sweep SIGKILLed with their keepers, which removes it on every other end: three
    were left in /tmp by each run of the suite. By the run ids of the runs under `dirs`."""
    for where in dirs:
        with contextlib.suppress(OSError):
            for attempt in where.rglob("attempt_0"):
                run_id = attempt.parent.name
                for private in Path(tempfile.gettempdir()).glob(f"safelaunch-{run_id}-*"):
                    shutil.rmtree(private, ignore_errors=True)


_wider_marks: set[str] = set()
_wider_sessions: set[int] = set()
_wider_dirs: set[Path] = set()
_reaper: list[int] = []


def pytest_configure(config: pytest.Config) -> None:
    _reaper.append(leaks.start_reaper(SESSION))


@pytest.hookimpl(trylast=True)  # after pytest's own, which tears the fixtures down
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Also after Ctrl-C (KeyboardInterrupt skips the running test's teardown)."""
    _sweep(_marks | _wider_marks, _sessions | _wider_sessions, _dirs | _wider_dirs)
    _marks.clear()
    _sessions.clear()
    _dirs.clear()
    leaks.sweep(leaks.prefixed(SESSION))
    for fd in _reaper:
        os.write(fd, leaks.DONE)
        os.close(fd)
    _reaper.clear()


@pytest.fixture
def torchrun() -> str:
    path = Path(sys.executable).with_name("torchrun")
    if not path.exists():
        pytest.skip("torchrun is not installed")
    return str(path)


def wait_for(condition, timeout: float, what: str, every: float = 0.2):
    """Poll until `condition()` is truthy (its value is returned); fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def status(where: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """`safelaunch status ARGS` against the runs under where/logs."""
    return subprocess.run(
        safelaunch_cmd("status", "--log-dir", str(where / "logs"), *args),
        cwd=where,
        env={k: v for k, v in os.environ.items() if not k.startswith("SAFELAUNCH_")},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass
class LiveJob:
    """A job watched with `safelaunch status` while it ran (see the hung_job fixture)."""

    where: Path
    returncode: int
    stderr: str
    looks: list  # `status --json` results while it ran, the straggler's first
    table: str  # `status` while it ran
    stacks: subprocess.CompletedProcess  # `status --stacks` while it ran
    stacks_file_sizes: tuple[int, int]  # rank 1's private stacks file before and after
    pids_alive_after_stacks: bool
    flight_records_after_stacks: list  # the dump signal also writes those: put back
    final: dict  # `status --json` after it ended

    @property
    def run_dir(self) -> Path:
        return (self.where / "logs" / "latest").resolve()


T = TypeVar("T")


def once_per_run(name: str, tmp_path_factory: pytest.TempPathFactory, make: Callable[[], T]) -> T:
    """make() once per pytest run, for a fixture that starts a real job for several tests.

    A module or session fixture runs once per pytest-xdist worker, and the tests that use it
    may be spread over both (--dist load; loadgroup ignores its marks under pytest 9). The
    first worker to get here runs the job and leaves its (picklable) result in the run's
    shared temporary directory; another waits for it: waiting costs no CPU, running the job
    again would (a hung job: ~6-8 CPU-s). A make() that raises leaves nothing: the next
    worker tries for itself.
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return make()
    shared = tmp_path_factory.getbasetemp().parent  # the run's, above each worker's own
    result = shared / f"{name}.pickle"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if result.exists():
            return pickle.loads(result.read_bytes())  # type: ignore[no-any-return]
        value = make()
        result.write_bytes(pickle.dumps(value))
        return value


@pytest.fixture(scope="session")
def hung_job(tmp_path_factory: pytest.TempPathFactory) -> LiveJob:
    """Two Gloo ranks; rank 1 stays in load_next_batch at step 3, printing (no hang) while
    `status` probes the job, then silent: the hang is declared 6 s later.

    Shared by the status tests (watching it live) and the browser test (its report.html):
    one real job instead of two.
    """
    return once_per_run("hung_job", tmp_path_factory, lambda: _hung_job(tmp_path_factory))


def _hung_job(tmp_path_factory: pytest.TempPathFactory) -> LiveJob:
    import json

    from safelaunch import status as status_module

    where = tmp_path_factory.mktemp("hung_job")
    proc, mark = start(
        where,
        "--nproc-per-node=2",
        "--hang-timeout=6",
        worker("status_job.py"),
        env={"STALL_RANK": "1"},
        text=True,
    )
    try:
        pids = where / "pids"
        wait_for(lambda: all((pids / f"ready-{r}").exists() for r in (0, 1)), 60, "step 2")

        def straggler() -> bool:
            # In-process, to be quick on a loaded machine; the CLI's own looks follow.
            with contextlib.suppress(Exception):
                text = status_module.show(
                    None, where / "logs", as_json_output=True, colour=False, stacks=False
                )
                record = json.loads(text)
                said = " ".join(record["suspicions"])
                # At the stall itself, not a transient one before it (a loaded machine
                # makes rank 1 late at an earlier step too: seen, then the looks below
                # came after rank 0 had moved on to wait at step 3 for a second only).
                rank = {r["rank"]: r for r in record["ranks"]}
                there = rank[1]["step"] == 3 and "load_next_batch" in (rank[1]["frame"] or "")
                waits = (rank[0]["collectives"] or 0) > (rank[1]["collectives"] or 0)
                return "straggler" in said and there and waits and rank[0]["idle_s"] >= 5.0
            return False

        wait_for(straggler, 30, "the straggler to show", every=0.3)
        snapshot = json.loads((_live_file(where)).read_text())
        stacks_file = Path(snapshot["private_dir"]) / "rank1.stacks"
        before = stacks_file.stat().st_size
        # --stacks last: the dump it asks for is output (progress) for the ranks, so a look
        # taken after it would see rank 0's idle time start again (seen on an idle machine,
        # where the three looks ran fast enough to overlap)
        looks = [_status_start(where, *args) for args in (["--json"], [])]
        done = [look.communicate(timeout=60) for look in looks]
        stacks_look = _status_start(where, "--stacks")
        looks.append(stacks_look)
        done.append(stacks_look.communicate(timeout=60))
        after = stacks_file.stat().st_size
        alive = all(_alive(r["pid"]) for r in snapshot["ranks"])
        flight = (where / "logs" / "latest").resolve() / "attempt_0" / "flight"
        flight_left = sorted(p.name for p in flight.glob("*.json"))
        (pids / "release").touch()  # rank 1 goes silent: the hang
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert_no_orphans(mark, within=3.0)
    final = json.loads(status(where, "--json").stdout)
    stacks = subprocess.CompletedProcess(looks[2].args, looks[2].returncode, *done[2])
    return LiveJob(
        where,
        proc.returncode,
        err,
        [json.loads(done[0][0])],
        done[1][0],
        stacks,
        (before, after),
        alive,
        flight_left,
        final,
    )


def _status_start(where: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        safelaunch_cmd("status", "--log-dir", str(where / "logs"), *args),
        cwd=where,
        env={k: v for k, v in os.environ.items() if not k.startswith("SAFELAUNCH_")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _live_file(where: Path) -> Path:
    return (where / "logs" / "latest").resolve() / "attempt_0" / "live" / "node0.json"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"T")


# Cases whose claim another test in CI already makes at lower cost, kept to be run in full
# (SAFELAUNCH_LONG_TESTS=1 scripts/test.sh): the suite stays under 10 minutes on 2 cores.
LONG = pytest.mark.skipif(
    not os.environ.get("SAFELAUNCH_LONG_TESTS"),
    reason="opt-in (SAFELAUNCH_LONG_TESTS=1): covered more cheaply in CI",
)
