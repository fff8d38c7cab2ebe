"""One attempt: spawn every rank, tee it, wait, tear down, sweep.

Teardown follows Supervisor's model: the handler only records a signal, the
loop acts; escalation is one shared monotonic deadline compared each tick
(SIGTERM, then SIGKILL when it passes), honoured on every path.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from safelaunch.console import Console
from safelaunch.plan import LaunchPlan, Timebox, WorkerSpec
from safelaunch.supervisor.activity import ActivityWatch
from safelaunch.supervisor.activity import sample as sample_activity
from safelaunch.supervisor.flight import request_records
from safelaunch.supervisor.hang import (
    HangEvidence,
    RankProgress,
    is_hung,
    last_progress,
    passed_point,
    read_beat,
)
from safelaunch.supervisor.interrupts import (
    OWN_SIGNAL_WAIT,
    expects_own_signal,
    signal_explains,
    stopped_from,
)
from safelaunch.supervisor.lines import rank_label
from safelaunch.supervisor.live import LiveState, RankNow, Writer
from safelaunch.supervisor.procs import (
    is_alive,
    job_processes,
    process_state,
    reap_strays,
    signal_group,
    signal_pids,
)
from safelaunch.supervisor.signals import SignalReceiver
from safelaunch.supervisor.spawn import StartedRank, start_rank
from safelaunch.supervisor.stacks import collect_stacks, save_evidence
from safelaunch.supervisor.tee import ConsoleWriter, FilteredLog, RankTee

HANG_WORD = "hang:"  # in a node's stop announcement: the others take their stacks too
ACTIVITY_EVERY = 0.5  # seconds between looks at the ranks' process trees in /proc
STRAY_GRACE = 2.0  # once every rank is gone, nothing is left to coordinate with
TEE_DRAIN = 5.0  # how long readers may wait for pipes a stranger still holds open
CONSOLE_CLOSE = 2.0  # a console blocked longer is left behind: the files have everything
CANNOT_RUN = 127  # shell convention for "command could not be run"
_COLOURS = ("36", "32", "35", "34", "33", "96", "92", "95")


class PeerWatch(Protocol):
    """Multi-node: the other nodes, as the supervisor sees them (safelaunch.rendezvous)."""

    def poll(self) -> str | None:
        """Why this node must stop its ranks now (another node stopped, or vanished)."""

    def announce(self, why: str) -> None:
        """This node is stopping its ranks: tell the others."""

    def share(self, snapshot: str) -> dict[int, str]:
        """This node's live snapshot out; every other node's latest one in (by node)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankExit:
    """How one rank's process ended (returncode as Popen gives it: -N for signal N)."""

    rank: int
    local_rank: int
    pid: int | None
    returncode: int
    ended_after: float  # seconds after the attempt started
    log_path: Path
    error_file: Path
    start_error: str | None = None  # why the rank's command could not run
    skipped: bool = False  # never started: an earlier rank's command could not run


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptRecord:
    """What happened in one attempt, for the outcome stage to judge."""

    plan: LaunchPlan
    exits: tuple[RankExit, ...]
    teardown_after: float | None  # when safelaunch began stopping ranks itself
    teardown_cause: str | None  # "rank failed", "signal", "hang", or a rerun's "passed"/"timebox"
    interrupt_signal: int | None
    hang: HangEvidence | None
    strays_ended: int
    log_problems: tuple[str, ...]
    duration: float
    timebox_note: str | None = None  # why an isolation rerun was stopped early
    peer_event: str | None = None  # multi-node: why another node made this one stop


def open_attempt_logs(plan: LaunchPlan, console: Console) -> bool:
    """Create the attempt directory and launcher.log; False (with a warning) if impossible."""
    try:
        plan.attempt_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(
            plan.attempt_dir / "launcher.log",
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
        )
    except OSError as exc:
        console.say(
            f"cannot write logs under {plan.attempt_dir}: {exc.strerror}; "
            "the job runs with console output only",
            "warning",
        )
        return False
    console.attach_log(fd)
    return True


def supervise(
    plan: LaunchPlan,
    console: Console,
    signals: SignalReceiver,
    *,
    logs_ok: bool,
    keeper_pid: int | None = None,
    peers: PeerWatch | None = None,
    write_file: Writer | None = None,
) -> AttemptRecord:
    """Run the attempt to its end; every process it started is gone on return.

    `write_file`: how files in the run directory are written (the report's helper); with
    it, the attempt's live state is kept for `safelaunch status` and the timeline.
    """
    live = LiveState(plan, write_file, peers) if write_file is not None and logs_ok else None
    return _Attempt(plan, console, signals, logs_ok, keeper_pid, peers, live).run()


class _Attempt:
    def __init__(
        self,
        plan: LaunchPlan,
        console: Console,
        signals: SignalReceiver,
        logs_ok: bool,
        keeper_pid: int | None,
        peers: PeerWatch | None = None,
        live: LiveState | None = None,
    ) -> None:
        self._plan = plan
        self._live = live
        self._peers = peers
        self._peer_event: str | None = None
        self._console = console
        self._signals = signals
        self._logs_ok = logs_ok
        self._keeper = {keeper_pid} if keeper_pid else set()
        self._events: queue.Queue[tuple[int, int, float]] = queue.Queue()
        self._ranks: dict[int, StartedRank] = {}
        self._exits: dict[int, RankExit] = {}
        self._tees: dict[int, RankTee] = {}
        self._spawned_at: dict[int, float] = {}  # wall clock
        self._hang: HangEvidence | None = None
        self._next_hang_check = 0.0
        self._next_activity_check = 0.0
        self._activity = ActivityWatch()
        self._writer = ConsoleWriter(console)
        self._filtered: dict[int, FilteredLog] = {}
        self._log_problems: list[str] = []
        self._t0 = time.monotonic()
        self._wall0 = time.time()
        self._teardown_at: float | None = None
        self._deadline: float | None = None
        self._cause: str | None = None
        self._interrupt: int | None = None
        self._killed = False
        self._next_timebox_check = 0.0
        self._timebox_note: str | None = None

    def run(self) -> AttemptRecord:
        strays = 0
        try:
            log_fds = self._start_ranks()  # before any thread: see procs.die_with
            self._start_threads(log_fds)
            self._watch()
            self._count_signalled_as_stopped()
            strays = self._sweep_strays()
            if self._live is not None:
                teardown = None if self._teardown_at is None else self._wall(self._teardown_at)
                self._live.finish(self._now(), teardown, self._cause)
        except BaseException:
            self._kill_everything()
            raise
        finally:
            self._stop_threads()
        return AttemptRecord(
            plan=self._plan,
            exits=tuple(self._exits[r] for r in sorted(self._exits)),
            teardown_after=None if self._teardown_at is None else self._teardown_at - self._t0,
            teardown_cause=self._cause,
            interrupt_signal=self._interrupt,
            hang=self._hang,
            strays_ended=strays,
            log_problems=tuple(self._log_problems),
            duration=time.monotonic() - self._t0,
            timebox_note=self._timebox_note,
            peer_event=self._peer_event,
        )

    # --- starting -------------------------------------------------------------

    def _start_ranks(self) -> dict[int, int | None]:
        log_fds: dict[int, int | None] = {}
        with contextlib.suppress(OSError):  # without it ranks run, unwatched
            self._plan.heartbeat_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for spec in self._plan.workers:
            if self._exits:  # an earlier rank could not start: the same argv fails here too
                self._record_exit(spec, None, CANNOT_RUN, skipped=True)
                continue
            log_fds[spec.rank] = self._open_rank_log(spec)
            try:
                self._spawned_at[spec.rank] = time.time()
                self._ranks[spec.rank] = start_rank(spec, self._plan.split_streams)
            except OSError as exc:
                self._record_exit(spec, None, CANNOT_RUN, f"could not start: {exc}")
                fd = log_fds.pop(spec.rank)
                if fd is not None:
                    os.write(fd, f"safelaunch: could not start {spec.argv[0]}: {exc}\n".encode())
                    os.close(fd)
        return log_fds

    def _open_rank_log(self, spec: WorkerSpec) -> int | None:
        if not self._logs_ok:
            return None
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW  # never through a link
            return os.open(spec.log_path, flags, 0o644)
        except OSError as exc:
            self._log_error(spec.rank, spec.log_path, exc, 0)
            return None

    def _start_threads(self, log_fds: dict[int, int | None]) -> None:
        self._writer.start()
        if self._logs_ok:
            for stream, filters in self._plan.duplicate_filters.items():
                if filters:
                    name = "filtered_stdout.log" if stream == 1 else "filtered_stderr.log"
                    self._filtered[stream] = FilteredLog(self._plan.attempt_dir / name, filters)
        width = len(str(max(w.rank for w in self._plan.workers)))
        for rank, started in self._ranks.items():
            tee = RankTee(
                rank=rank,
                pipes=started.pipes,
                log_fd=log_fds[rank],
                log_path=started.spec.log_path,
                prefix=self._prefix(rank, width),
                shown_streams=started.spec.console_streams,
                writer=self._writer,
                filtered=self._filtered,
                on_log_error=self._log_error,
            )
            tee.start()
            self._tees[rank] = tee
            threading.Thread(
                target=self._wait_for, args=(started,), name=f"safelaunch-wait-{rank}", daemon=True
            ).start()

    def _prefix(self, rank: int, width: int) -> str:
        label = rank_label(rank, width, self._plan.node)
        if not self._plan.color:
            return label + " "
        return f"\x1b[{_COLOURS[rank % len(_COLOURS)]}m{label}\x1b[0m "

    def _wait_for(self, started: StartedRank) -> None:
        returncode = started.process.wait()
        self._events.put((started.spec.rank, returncode, time.monotonic()))

    def _log_error(self, rank: int, path: Path, exc: OSError, offset: int) -> None:
        problem = f"rank {rank}'s log {path} is incomplete after byte {offset}: {exc.strerror}"
        self._log_problems.append(problem)
        self._console.say(problem + " (the console still shows its output)", "warning")

    # --- watching -------------------------------------------------------------

    def _watch(self) -> None:
        total = len(self._plan.workers)
        while len(self._exits) < total:
            self._collect(self._plan.monitor_interval)
            reap_strays(keep=set(self._ranks_pids()) | self._keeper)
            self._act_on_signals()
            if self._teardown_at is None and self._any_failure():
                first = min(
                    (e for e in self._exits.values() if e.returncode != 0),
                    key=lambda e: e.ended_after,
                )
                self._tell_peers(f"rank {first.rank} failed (returncode {first.returncode})")
                # what the survivors were waiting for, before SIGTERM ends them
                self._request_flight_records()
                self._begin_teardown("rank failed", signal.SIGTERM)
            if self._teardown_at is None and self._peers is not None:
                self._check_peers(self._peers)
            deadline_passed = self._deadline is not None and time.monotonic() >= self._deadline
            if deadline_passed and not self._killed:
                self._kill_ranks()
            if self._teardown_at is None and self._plan.hang_timeout > 0:
                self._check_hang()
            if self._teardown_at is None and self._plan.rerun is not None:
                self._check_timebox(self._plan.rerun.timebox)
            if self._live is not None and self._live.due(time.time()):
                self._live.poll(time.time(), self._now())
        self._await_own_signal()

    def _collect(self, timeout: float) -> None:
        try:
            item = self._events.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            rank, returncode, ended_at = item
            started = self._ranks[rank]
            self._record_exit(started.spec, started.process.pid, returncode, ended_at=ended_at)
            try:
                item = self._events.get_nowait()
            except queue.Empty:
                return

    def _record_exit(
        self,
        spec: WorkerSpec,
        pid: int | None,
        returncode: int,
        start_error: str | None = None,
        ended_at: float | None = None,
        skipped: bool = False,
    ) -> None:
        ended_at = time.monotonic() if ended_at is None else ended_at
        self._exits[spec.rank] = RankExit(
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

    def _wall(self, monotonic: float) -> float:
        return self._wall0 + (monotonic - self._t0)

    def _now(self) -> list[RankNow]:
        """Every rank as the supervisor sees it now, for the live state."""
        views = []
        for spec in self._plan.workers:
            started = self._ranks.get(spec.rank)
            ended = self._exits.get(spec.rank)
            tee = self._tees.get(spec.rank)
            views.append(
                RankNow(
                    rank=spec.rank,
                    local_rank=spec.local_rank,
                    pid=started.process.pid if started is not None else None,
                    spawned_at=self._spawned_at.get(spec.rank) if started is not None else None,
                    heartbeat_file=spec.heartbeat_file,
                    bootstrapped=spec.bootstrapped and self._plan.hang_timeout > 0,
                    last_output=tee.last_output if tee is not None else None,
                    returncode=ended.returncode if ended is not None else None,
                    ended_at=self._wall0 + ended.ended_after if ended is not None else None,
                )
            )
        return views

    def _any_failure(self) -> bool:
        return any(e.returncode != 0 for e in self._exits.values())

    def _ranks_pids(self) -> list[int]:
        return [started.process.pid for started in self._ranks.values()]

    def _act_on_signals(self) -> None:
        for signum, after in self._signals.take_merged():
            self._console.say(
                f"received {signal.Signals(signum).name} again {after * 1000:.0f} ms later: "
                "the same request (SLURM sends it twice at a time limit), not escalated"
            )
        for signum in self._signals.take_passed_on():
            self._pass_on(signum)
        for signum in self._signals.take():
            if self._teardown_at is None:
                self._interrupt = signum
                self._tell_peers(f"interrupted by {signal.Signals(signum).name}")
                self._console.say(
                    f"received {signal.Signals(signum).name}: forwarding it to every rank "
                    f"(SIGKILL in {self._plan.shutdown_timeout:g} s; again to kill now)"
                )
                self._begin_teardown("signal", signum)
            elif self._interrupt is None and signal_explains(
                signum, self._cause, self._failed_codes(), self._peer_event
            ):
                self._signal_reached_ranks_first(signum)
            elif self._interrupt is None:  # already stopping for another reason
                self._interrupt = signum
                self._console.say(
                    f"received {signal.Signals(signum).name} while stopping the ranks "
                    f"({self._cause}): SIGKILL at the deadline as planned; again to kill now"
                )
            else:
                self._console.say(f"received {signal.Signals(signum).name} again: killing now")
                self._deadline = time.monotonic()
                self._killed = False

    def _pass_on(self, signum: int) -> None:
        """SIGUSR1/SIGUSR2: to each live rank's own process; the job goes on."""
        name = signal.Signals(signum).name
        live = [s.process.pid for r, s in self._ranks.items() if r not in self._exits]
        if not self._signals.pass_on:
            self._console.say(
                f"received {name}: SLURM sent it to every process of the step, the ranks "
                "included; not sent again, the job goes on"
            )
            return
        # The rank's process only, not its group: its DataLoader workers would die of it.
        signal_pids(set(live), signum)
        self._console.say(f"received {name}: passed on to {len(live)} rank(s); the job goes on")

    def _failed_codes(self) -> list[int]:
        return [e.returncode for e in self._exits.values() if e.returncode != 0]

    def _signal_reached_ranks_first(self, signum: int) -> None:
        name = signal.Signals(signum).name
        self._console.say(
            f"received {name}, which the ranks had received too: an interrupt, not a rank "
            f"failure (SIGKILL at the deadline, {self._plan.shutdown_timeout:g} s after the first)"
        )
        self._interrupt = signum
        self._cause = "signal"
        self._tell_peers(f"interrupted by {name}")

    def _count_signalled_as_stopped(self) -> None:
        """An interrupt: ranks that died of that very signal just before it are stopped too.

        The teardown began with the launcher's signal; a rank ending of the same signal
        before that (within a tick, or before the launcher's copy arrived: SLURM signals
        the whole step) was ended by the same request, not by a fault of its own.
        """
        if self._cause != "signal" or self._interrupt is None or self._teardown_at is None:
            return
        ended = [(e.returncode, e.ended_after) for e in self._exits.values()]
        since = stopped_from(self._interrupt, self._teardown_at - self._t0, ended)
        self._teardown_at = self._t0 + since

    def _await_own_signal(self) -> None:
        """Every rank died of a signal the launcher handles: wait briefly for its own copy.

        When SLURM signals the whole step the ranks can finish dying before the launcher's
        signal arrives; without this short wait an scancel would read as a rank failure.
        """
        if self._interrupt is not None or not expects_own_signal(
            self._cause, self._failed_codes(), self._signals.stopping
        ):
            return
        until = time.monotonic() + OWN_SIGNAL_WAIT
        while time.monotonic() < until and self._interrupt is None:
            self._act_on_signals()
            time.sleep(0.02)

    def _begin_teardown(self, cause: str, signum: int) -> None:
        self._teardown_at = time.monotonic()
        self._deadline = self._teardown_at + self._plan.shutdown_timeout
        self._cause = cause
        for pid in self._ranks_pids():  # exited ranks too: their children share the group
            signal_group(pid, signum)
            signal_group(pid, signal.SIGCONT)  # a stopped rank can only act on it running

    def _request_flight_records(self) -> None:
        live = [s for rank, s in self._ranks.items() if rank not in self._exits]
        with contextlib.suppress(OSError):
            request_records(live, self._plan.attempt_dir, signalled=False)

    # --- hangs ----------------------------------------------------------------

    def _check_hang(self) -> None:
        now = time.monotonic()
        if now < self._next_hang_check:
            return
        self._next_hang_check = now + max(0.1, self._plan.heartbeat_interval / 2)
        if now >= self._next_activity_check:  # a pass over /proc: not every tick
            self._next_activity_check = now + max(ACTIVITY_EVERY, self._plan.heartbeat_interval)
            live = {r: s.process.pid for r, s in self._ranks.items() if r not in self._exits}
            beats = {r: read_beat(r, self._ranks[r].spec.heartbeat_file) for r in live}
            self._activity.update(sample_activity(live), beats, time.time())
        progress = self._progress()
        wall = time.time()
        if is_hung(progress, wall, self._plan.hang_timeout, self._plan.heartbeat_interval):
            self._declare_hang(progress, wall)

    def _progress(self) -> list[RankProgress]:
        """Every live rank's latest sign of progress."""
        progress = []
        for rank, started in self._ranks.items():
            if rank in self._exits:
                continue
            beat = read_beat(rank, started.spec.heartbeat_file)
            last = last_progress(
                beat,
                self._tees[rank].last_output,
                self._spawned_at[rank],
                started.spec.bootstrapped,
                self._activity.last_work.get(rank),
            )
            progress.append(
                RankProgress(
                    rank=rank,
                    last_progress=last,
                    beat=beat,
                    heartbeat=started.spec.bootstrapped and self._plan.hang_timeout > 0,
                )
            )
        return progress

    def _declare_hang(
        self, progress: list[RankProgress], wall: float, because: str | None = None
    ) -> None:
        live = [self._ranks[p.rank] for p in progress]
        states = {s.spec.rank: process_state(s.process.pid) for s in live}
        self._console.say(
            f"hang on {because}: collecting every rank's stack here too, then stopping"
            if because
            else f"hang: no rank made progress for {self._plan.hang_timeout:g} s "
            "(--hang-timeout); collecting every rank's stack, then stopping the job"
        )
        self._hang = HangEvidence(
            detected_at=wall,
            timeout=self._plan.hang_timeout,
            interval=self._plan.heartbeat_interval,
            ranks=tuple(progress),
            states=states,
            stack_files=collect_stacks(live, self._plan.attempt_dir / "stacks"),
        )
        save_evidence(self._hang, self._plan.attempt_dir / "stacks" / "hang.json")
        if because is None:
            self._tell_peers(f"{HANG_WORD} no progress for {self._plan.hang_timeout:g} s")
        self._begin_teardown("hang", signal.SIGTERM)

    # --- other nodes ----------------------------------------------------------

    def _tell_peers(self, what: str) -> None:
        if self._peers is not None:
            self._peers.announce(f"node {self._plan.node}: {what}")

    def _check_peers(self, peers: PeerWatch) -> None:
        event = peers.poll()
        if event is None:
            return
        self._peer_event = event
        progress = self._progress()
        if HANG_WORD in event and progress:  # where are this node's ranks? the culprit may be here
            self._declare_hang(progress, time.time(), because=event)
            return
        self._console.say(f"stopping this node's ranks: {event}")
        self._begin_teardown("peer", signal.SIGTERM)

    # --- isolation reruns -----------------------------------------------------

    def _check_timebox(self, box: Timebox) -> None:
        """Stop a rerun once it is clearly past where the job failed, or at its cap."""
        now = time.monotonic()
        if now < self._next_timebox_check:
            return
        self._next_timebox_check = now + max(0.1, self._plan.heartbeat_interval / 2)
        live = [s for rank, s in self._ranks.items() if rank not in self._exits]
        if not live:
            return
        beats = [read_beat(s.spec.rank, s.spec.heartbeat_file) for s in live]
        note = passed_point(box, beats, now - self._t0)
        if note is not None:
            self._timebox_note = note
            self._console.say(f"isolation: {note}: stopping the rerun, it has shown enough")
            self._begin_teardown("passed", signal.SIGTERM)
        elif now - self._t0 >= box.cap_s:
            self._timebox_note = f"still running at the {box.cap_s:g} s cap (--isolate-timeout)"
            self._console.say(f"isolation: {self._timebox_note}: stopping the rerun")
            self._begin_teardown("timebox", signal.SIGTERM)

    def _kill_ranks(self) -> None:
        for pid in self._ranks_pids():
            signal_group(pid, signal.SIGKILL)
        self._killed = True

    # --- ending ---------------------------------------------------------------

    def _find_strays(self) -> set[int]:
        return job_processes(self._plan.run.token, below=os.getpid(), exclude=self._keeper)

    def _sweep_strays(self) -> int:
        """End what the ranks left behind: own sessions, SIGTERM-ignorers, daemons."""
        strays = self._find_strays()
        if not strays:
            return 0
        now = time.monotonic()
        end = now + min(STRAY_GRACE, self._plan.shutdown_timeout)
        if self._deadline is not None:
            end = min(end, max(self._deadline, now))
        signal_pids(strays, signal.SIGTERM)
        seen = set(strays)
        while time.monotonic() < end and any(is_alive(pid) for pid in strays):
            time.sleep(0.05)
            reap_strays(keep=self._keeper)
        for _ in range(20):  # a dying process may still start another
            left = {pid for pid in strays if is_alive(pid)} | self._find_strays()
            if not left:
                break
            seen |= left
            signal_pids(left, signal.SIGKILL)
            time.sleep(0.02)
            reap_strays(keep=self._keeper)
            strays = left
        return len(seen)

    def _kill_everything(self) -> None:
        """The launcher itself failed: leave nothing running."""
        for pid in self._ranks_pids():
            signal_group(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            signal_pids(self._find_strays(), signal.SIGKILL)
        for started in self._ranks.values():
            with contextlib.suppress(Exception):
                started.process.wait(timeout=5)

    def _stop_threads(self) -> None:
        until = time.monotonic() + TEE_DRAIN
        for tee in self._tees.values():
            tee.stop_by(until)
        for tee in self._tees.values():
            tee.join(TEE_DRAIN + 1)
        if self._writer.is_alive():
            self._writer.close(CONSOLE_CLOSE)
        for filtered in self._filtered.values():
            filtered.close()
