"""The attempt's rank processes: started, teed to their logs and the console, waited for.

The loop decides (teardown, signals, watchers); this keeps the processes, their pipes and
their exits as they come, so that the decisions read like decisions.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from pathlib import Path

from safelaunch.console import Console, Level
from safelaunch.plan import LaunchPlan, WorkerSpec
from safelaunch.supervisor.attempt_record import RankExit
from safelaunch.supervisor.spawn import StartedRank, start_rank
from safelaunch.supervisor.starting import filtered_logs, open_rank_log, rank_prefix
from safelaunch.supervisor.tee import ConsoleWriter, FilteredLog, RankTee
from safelaunch.supervisor.watchers import Clock

TEE_DRAIN = 5.0  # how long readers may wait for pipes a stranger still holds open
CONSOLE_CLOSE = 2.0  # a console blocked longer is left behind: the files have everything
CANNOT_RUN = 127  # shell convention for "command could not be run"


class Workers:
    """Every rank of one attempt. `started`, `exits`, `tees` and `spawned_at` are the live
    dicts the rank signs read (supervisor/rank_signs.py)."""

    def __init__(
        self, plan: LaunchPlan, console: Console, clock: Clock, logs_ok: bool, t0: float
    ) -> None:
        self._plan = plan
        self._console = console
        self._clock = clock
        self._logs_ok = logs_ok
        self._t0 = t0  # monotonic: exits are timed from here
        self.started: dict[int, StartedRank] = {}
        self.exits: dict[int, RankExit] = {}
        self.tees: dict[int, RankTee] = {}
        self.spawned_at: dict[int, float] = {}  # wall clock
        self.log_problems: list[str] = []
        # Exits as they come, and a doorbell the loop sleeps on: a raw lock, released
        # (rung) by whoever has news. A queue's timed get cost ~77 us of CPU a wake
        # against ~51 us (bench: the loop wakes up to 10 times a second).
        self._events: deque[tuple[int, int, float]] = deque()
        self._bell = threading.Lock()
        self._bell.acquire()
        self._writer = ConsoleWriter(console)
        self._filtered: dict[int, FilteredLog] = {}

    def start(self) -> None:
        """Spawn every rank, then the threads that tee and wait for them."""
        log_fds = self._start_ranks()  # before any thread: see procs.die_with
        self._start_threads(log_fds)

    def _start_ranks(self) -> dict[int, int | None]:
        log_fds: dict[int, int | None] = {}
        with contextlib.suppress(OSError):  # without it ranks run, unwatched
            self._plan.heartbeat_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for spec in self._plan.workers:
            if self.exits:  # an earlier rank could not start: the same argv fails here too
                self.record_exit(spec, None, CANNOT_RUN, skipped=True)
                continue
            log_fds[spec.rank] = open_rank_log(spec, self._log_error) if self._logs_ok else None
            try:
                self.spawned_at[spec.rank] = self._clock.wall()
                self.started[spec.rank] = start_rank(spec, self._plan.split_streams)
            except OSError as exc:
                self.record_exit(spec, None, CANNOT_RUN, f"could not start: {exc}")
                fd = log_fds.pop(spec.rank)
                if fd is not None:
                    os.write(fd, f"safelaunch: could not start {spec.argv[0]}: {exc}\n".encode())
                    os.close(fd)
        return log_fds

    def _start_threads(self, log_fds: dict[int, int | None]) -> None:
        self._writer.start()
        if self._logs_ok:
            self._filtered.update(filtered_logs(self._plan))
        for rank, started in self.started.items():
            tee = RankTee(
                rank=rank,
                pipes=started.pipes,
                log_fd=log_fds[rank],
                log_path=started.spec.log_path,
                prefix=rank_prefix(self._plan, rank),
                shown_streams=started.spec.console_streams,
                writer=self._writer,
                filtered=self._filtered,
                on_log_error=self._log_error,
            )
            tee.start()
            self.tees[rank] = tee
            threading.Thread(
                target=self._wait_for, args=(started,), name=f"safelaunch-wait-{rank}", daemon=True
            ).start()

    def _wait_for(self, started: StartedRank) -> None:
        returncode = started.process.wait()
        self._events.append((started.spec.rank, returncode, self._clock.monotonic()))
        self.wake()

    def wake(self) -> None:
        """End collect()'s wait now (a rank ended; the launcher received a signal)."""
        with contextlib.suppress(RuntimeError):  # rung already, not answered yet
            self._bell.release()

    def _log_error(self, rank: int, path: Path, exc: OSError, offset: int) -> None:
        problem = f"rank {rank}'s log {path} is incomplete after byte {offset}: {exc.strerror}"
        self.log_problems.append(problem)
        self._console.say(problem + " (the console still shows its output)", Level.WARNING)

    def collect(self, timeout: float) -> None:
        """Wait at most `timeout`, less when woken (wake()); record every exit that came."""
        self._bell.acquire(timeout=timeout)
        while self._events:
            rank, returncode, ended_at = self._events.popleft()
            started = self.started[rank]
            self.record_exit(started.spec, started.process.pid, returncode, ended_at=ended_at)

    def record_exit(
        self,
        spec: WorkerSpec,
        pid: int | None,
        returncode: int,
        start_error: str | None = None,
        ended_at: float | None = None,
        skipped: bool = False,
    ) -> None:
        ended_at = self._clock.monotonic() if ended_at is None else ended_at
        self.exits[spec.rank] = RankExit(
            rank=spec.rank,
            local_rank=spec.local_rank,
            pid=pid,
            returncode=returncode,
            ended_after=ended_at - self._t0,
            log_path=spec.log_path,
            error_file=spec.error_file,
            start_error=start_error,
            skipped=skipped,
        )

    def all_ended(self) -> bool:
        return len(self.exits) >= len(self._plan.workers)

    def first_failure(self) -> RankExit | None:
        """The exit with a nonzero code that came first, if any."""
        failed = [e for e in self.exits.values() if e.returncode != 0]
        return min(failed, key=lambda e: e.ended_after) if failed else None

    def failed_codes(self) -> list[int]:
        return [e.returncode for e in self.exits.values() if e.returncode != 0]

    def pids(self) -> list[int]:
        """Every started rank's pid (its process group's id), exited ones included."""
        return [started.process.pid for started in self.started.values()]

    def live(self) -> list[StartedRank]:
        return [s for rank, s in self.started.items() if rank not in self.exits]

    def ended(self) -> tuple[RankExit, ...]:
        return tuple(self.exits[r] for r in sorted(self.exits))

    def stop_threads(self) -> None:
        """Let the tees drain (bounded), then close the console writer and filtered logs."""
        until = self._clock.monotonic() + TEE_DRAIN
        for tee in self.tees.values():
            tee.stop_by(until)
        for tee in self.tees.values():
            tee.join(TEE_DRAIN + 1)
        if self._writer.is_alive():
            self._writer.close(CONSOLE_CLOSE)
        for filtered in self._filtered.values():
            filtered.close()
