"""--on-verdict CMD: the user's command, run when an attempt or the job ends.

The person woken at 3 a.m. is woken by an alert: this is how safelaunch's verdict reaches
one (docs/on-verdict.md; configs/slack_verdict.py). The command runs through /bin/sh with
the verdict in its environment (the names below). It is a guest of the launch, never a
part of it:

- bounded: at `timeout` seconds its whole process group is killed; when it exits, what it
  left behind in that group is killed too, so it leaves no orphan;
- quiet: its output goes to the attempt's launcher.log, not to the console;
- harmless: nothing it does (failing, hanging, never starting) changes the job's outcome
  or exit code; a failure is said in one warning line.

The leader is waited for without being reaped (waitid WNOWAIT) until its group has been
killed: while it is a zombie its pid, and so its group id, cannot be reused by another
process, so the kill cannot reach a stranger.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from safelaunch import exitcodes
from safelaunch.console import Console, Level
from safelaunch.rundir import rank_logs, report_file
from safelaunch.rundir.writing import shown_path
from safelaunch.vocab import StrEnum

# The hook's environment: the launcher's, plus these (docs/on-verdict.md).
EVENT = "SAFELAUNCH_EVENT"  # attempt (a restart follows) or job (the last call)
VERDICT = "SAFELAUNCH_VERDICT"  # one line: "FAILED: rank 1 exited with code 3 ...; ValueError"
STATUS = "SAFELAUNCH_STATUS"  # succeeded, failed, hung, interrupted, or error (ours)
EXIT_CODE = "SAFELAUNCH_EXIT_CODE"  # the code safelaunch exits with (job) or the attempt's
REPORT = "SAFELAUNCH_REPORT"  # the attempt's report.json; empty when none was written
RUN_ID = "SAFELAUNCH_RUN_ID"
RUN_DIR = "SAFELAUNCH_RUN_DIR"
ATTEMPT = "SAFELAUNCH_ATTEMPT"  # 0 for the first attempt
NODE_RANK = "SAFELAUNCH_NODE_RANK"  # this launcher's node (0 on one node)
NAMES = (EVENT, VERDICT, STATUS, EXIT_CODE, REPORT, RUN_ID, RUN_DIR, ATTEMPT, NODE_RANK)

POLL_S = 0.02  # how often the hook's end is looked for: a 50 ms hook costs at most this more
MAX_VERDICT = 500  # characters: an environment variable, not a report
SHELL = "/bin/sh"


class HookEvent(StrEnum):
    """When the hook runs: after an attempt that is restarted, or once at the job's end."""

    ATTEMPT = "attempt"
    JOB = "job"


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What the hook is told."""

    event: HookEvent
    line: str
    status: str
    exit_code: int
    report: Path | None
    attempt: int
    run_id: str
    run_dir: Path
    node_rank: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class HookRun:
    """How the hook ended: its code (None when it did not start or was killed)."""

    returncode: int | None
    timed_out: bool
    elapsed: float
    error: str | None = None  # it could not be started

    @property
    def failed(self) -> bool:
        return self.timed_out or self.error is not None or self.returncode != 0


def verdict_line(head: str, error: str | None = None) -> str:
    """One line for the hook: the summary's first line, and the error when there is one."""
    text = f"{head}: {error}" if error else head
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_VERDICT else flat[: MAX_VERDICT - 3] + "..."


def hook_env(environ: Mapping[str, str], verdict: Verdict) -> dict[str, str]:
    """The launcher's environment with the verdict's variables (ours replace any set)."""
    env = dict(environ)
    env.update(
        {
            EVENT: str(verdict.event),
            VERDICT: verdict.line,
            STATUS: verdict.status,
            EXIT_CODE: str(verdict.exit_code),
            REPORT: str(verdict.report) if verdict.report is not None else "",
            RUN_ID: verdict.run_id,
            RUN_DIR: str(verdict.run_dir),
            ATTEMPT: str(verdict.attempt),
            NODE_RANK: str(verdict.node_rank),
        }
    )
    return env


def run_hook(
    command: str,
    verdict: Verdict,
    *,
    environ: Mapping[str, str],
    timeout: float,
    log_path: Path | None,
    clock: Callable[[], float] = time.monotonic,
) -> HookRun:
    """Run the hook to its end or to `timeout`; never raises, never outlives its call."""
    started = clock()
    log_fd = _open_log(log_path)
    try:
        _note(log_fd, f"on-verdict ({verdict.event}, {verdict.status}): running {command!r}\n")
        try:
            proc = subprocess.Popen(
                [SHELL, "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=log_fd if log_fd is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                env=hook_env(environ, verdict),
                start_new_session=True,  # its own group: killed whole, away from Ctrl-C
                close_fds=True,
            )
        except (OSError, ValueError) as exc:
            ended = HookRun(returncode=None, timed_out=False, elapsed=0.0, error=str(exc))
        else:
            ended = _wait(proc, started, timeout, clock)
        _note(log_fd, f"on-verdict: {_how(ended)}\n")
        return ended
    finally:
        if log_fd is not None:
            os.close(log_fd)


def _wait(
    proc: subprocess.Popen[bytes], started: float, timeout: float, clock: Callable[[], float]
) -> HookRun:
    timed_out = False
    while True:
        try:
            exited = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            break  # reaped elsewhere: its group is killed below all the same
        if exited is not None:
            break
        if clock() - started >= timeout:
            timed_out = True
            break
        time.sleep(POLL_S)
    # The leader is still unreaped here: its group id is its own, whatever remains of it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    code = proc.wait()
    return HookRun(
        returncode=None if timed_out else code, timed_out=timed_out, elapsed=clock() - started
    )


def _how(ended: HookRun) -> str:
    if ended.error is not None:
        return f"could not start: {ended.error}"
    if ended.timed_out:
        return f"still running after {ended.elapsed:.1f} s: killed with its process group"
    return f"exited {ended.returncode} after {ended.elapsed:.2f} s"


def warning_line(ended: HookRun, log_path: Path | None) -> str | None:
    """The console's one line about a hook that failed; None when it succeeded."""
    if not ended.failed:
        return None
    where = f" (its output: {shown_path(log_path)})" if log_path is not None else ""
    return f"--on-verdict command {_how(ended)}{where}; the job's exit code is unchanged"


def _failure_line(failure: BaseException | None) -> str:
    """A launch that raised: its error's one line (the one the CLI shows)."""
    render = getattr(failure, "render", None)
    if callable(render):
        return verdict_line(str(render()))
    name = type(failure).__name__ if failure is not None else "an unknown error"
    return f"safelaunch stopped on an internal error ({name}: a bug, please report it)"


def _open_log(path: Path | None) -> int | None:
    if path is None:
        return None
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o644)
    except OSError:
        return None  # no log: the hook's output is dropped, the hook still runs


def _note(fd: int | None, text: str) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.write(fd, text.encode("utf-8", "replace"))


class Notifier:
    """The launch's side of the hook: what the last attempt said, and when to call it.

    launch.py tells it each attempt's verdict and, once, the job's exit code (on every
    path: success, failure, hang, Ctrl-C, a signal between attempts, an internal error).
    """

    def __init__(
        self,
        command: str,
        *,
        timeout: float,
        environ: Mapping[str, str],
        run_id: str,
        run_dir: Path,
        node_rank: int,
        console: Console,
    ) -> None:
        self._command = command
        self._timeout = timeout
        self._environ = environ
        self._run_id, self._run_dir, self._node_rank = run_id, run_dir, node_rank
        self._console = console
        self._last: Verdict | None = None
        self._log: Path | None = None

    def attempt_ended(
        self,
        *,
        attempt: int,
        line: str,
        status: str,
        exit_code: int,
        attempt_dir: Path,
        restarting: bool,
        node: int | None = None,
    ) -> None:
        """An attempt's verdict; the hook runs now when a restart follows. `node`: this
        launcher's, once a c10d rendezvous has given it one."""
        if node is not None:
            self._node_rank = node
        report = report_file.report(attempt_dir)
        self._last = self._verdict(
            HookEvent.ATTEMPT, line, status, exit_code, attempt, report if report.exists() else None
        )
        self._log = rank_logs.launcher_log(attempt_dir)
        if restarting:
            self._call(self._last)

    def ended_between_attempts(self, line: str, status: str) -> None:
        """The job stopped before its next attempt started (a signal, a node that left)."""
        last = self._last
        attempt = last.attempt if last is not None else 0
        report = last.report if last is not None else None
        self._last = self._verdict(HookEvent.ATTEMPT, line, status, 0, attempt, report)

    def job_ended(self, exit_code: int | None, failure: BaseException | None = None) -> None:
        """The job's end: the hook's last call. `exit_code` None: the launch raised `failure`
        (a node that never joined, or a bug of ours), which the CLI turns into its code."""
        last = self._last
        if exit_code is None:
            line, status = _failure_line(failure), "error"
            exit_code = getattr(failure, "exit_code", exitcodes.INTERNAL)
        elif last is not None:
            line, status = last.line, last.status
        else:
            line, status = f"the job ended with exit code {exit_code} before any attempt", "error"
        attempt = last.attempt if last is not None else 0
        report = last.report if last is not None else None
        self._call(self._verdict(HookEvent.JOB, line, status, exit_code, attempt, report))

    def _verdict(
        self,
        event: HookEvent,
        line: str,
        status: str,
        exit_code: int,
        attempt: int,
        report: Path | None,
    ) -> Verdict:
        return Verdict(
            event=event,
            line=line,
            status=status,
            exit_code=exit_code,
            report=report,
            attempt=attempt,
            run_id=self._run_id,
            run_dir=self._run_dir,
            node_rank=self._node_rank,
        )

    def _call(self, verdict: Verdict) -> None:
        ended = run_hook(
            self._command,
            verdict,
            environ=self._environ,
            timeout=self._timeout,
            log_path=self._log,
        )
        warning = warning_line(ended, self._log)
        if warning is not None:
            self._console.say(warning, Level.WARNING)
