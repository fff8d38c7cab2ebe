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
from pathlib import Path

from safelaunch.console import Console
from safelaunch.plan import LaunchPlan, WorkerSpec
from safelaunch.supervisor import teardown
from safelaunch.supervisor.ending import kill_everything, sweep_strays
from safelaunch.supervisor.flight import request_records
from safelaunch.supervisor.hang import HangEvidence, RankProgress
from safelaunch.supervisor.interrupts import (
    OWN_SIGNAL_WAIT,
    expects_own_signal,
    signal_explains,
    stopped_from,
)
from safelaunch.supervisor.live import LiveState, Writer
from safelaunch.supervisor.procs import reap_strays, signal_group, signal_pids
from safelaunch.supervisor.record import AttemptRecord, PeerWatch, RankExit
from safelaunch.supervisor.signals import SignalReceiver
from safelaunch.supervisor.signs import RankSigns
from safelaunch.supervisor.spawn import StartedRank, start_rank
from safelaunch.supervisor.stacks import take_evidence
from safelaunch.supervisor.starting import filtered_logs, open_rank_log, rank_prefix
from safelaunch.supervisor.teardown import TeardownCause
from safelaunch.supervisor.tee import ConsoleWriter, FilteredLog, RankTee
from safelaunch.supervisor.watchers import (
    HANG_WORD,
    Clock,
    HangWatch,
    PeerWatcher,
    StopReason,
    SystemClock,
    Throttle,
    TimeboxWatch,
    Watcher,
    poll_all,
)

ACTIVITY_EVERY = 0.5  # seconds between looks at the ranks' process trees in /proc
TEE_DRAIN = 5.0  # how long readers may wait for pipes a stranger still holds open
CONSOLE_CLOSE = 2.0  # a console blocked longer is left behind: the files have everything
CANNOT_RUN = 127  # shell convention for "command could not be run"


def supervise(
    plan: LaunchPlan,
    console: Console,
    signals: SignalReceiver,
    *,
    logs_ok: bool,
    keeper_pid: int | None = None,
    peers: PeerWatch | None = None,
    write_file: Writer | None = None,
    clock: Clock | None = None,
) -> AttemptRecord:
    """Run the attempt to its end; every process it started is gone on return.

    `write_file`: how files in the run directory are written (the report's helper); with
    it, the attempt's live state is kept for `safelaunch status` and the timeline.
    """
    live = LiveState(plan, write_file, peers) if write_file is not None and logs_ok else None
    attempt = _Attempt(plan, console, signals, logs_ok, keeper_pid, peers, live, clock)
    return attempt.run()


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
        clock: Clock | None = None,
    ) -> None:
        self._clock = clock or SystemClock()
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
        self._writer = ConsoleWriter(console)
        self._filtered: dict[int, FilteredLog] = {}
        self._log_problems: list[str] = []
        self._t0 = self._clock.monotonic()
        self._wall0 = self._clock.wall()
        self._signs = RankSigns(
            plan=plan,
            clock=self._clock,
            ranks=self._ranks,
            exits=self._exits,
            tees=self._tees,
            spawned_at=self._spawned_at,
            wall0=self._wall0,
        )
        self._td = teardown.RUNNING
        self._interrupt: int | None = None
        self._timebox_note: str | None = None
        self._every_tick, self._throttled = self._watchers()
        # hang and time-box checks read files: at most twice per heartbeat interval
        self._throttle = Throttle(max(0.1, plan.heartbeat_interval / 2))

    def run(self) -> AttemptRecord:
        strays = 0
        try:
            log_fds = self._start_ranks()  # before any thread: see procs.die_with
            self._start_threads(log_fds)
            self._watch()
            self._count_signalled_as_stopped()
            strays = sweep_strays(
                self._plan.run.token, self._keeper, self._plan.shutdown_timeout, self._td.deadline
            )
            if self._live is not None:
                began = None if self._td.began_at is None else self._wall(self._td.began_at)
                self._live.finish(self._signs.now(), began, self._td.cause)
        except BaseException:
            kill_everything(self._ranks.values(), self._plan.run.token, self._keeper)
            raise
        finally:
            self._stop_threads()
        return AttemptRecord(
            plan=self._plan,
            exits=tuple(self._exits[r] for r in sorted(self._exits)),
            teardown_after=None if self._td.began_at is None else self._td.began_at - self._t0,
            teardown_cause=self._td.cause,
            interrupt_signal=self._interrupt,
            hang=self._hang,
            strays_ended=strays,
            log_problems=tuple(self._log_problems),
            duration=self._clock.monotonic() - self._t0,
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
            log_fds[spec.rank] = open_rank_log(spec, self._log_error) if self._logs_ok else None
            try:
                self._spawned_at[spec.rank] = self._clock.wall()
                self._ranks[spec.rank] = start_rank(spec, self._plan.split_streams)
            except OSError as exc:
                self._record_exit(spec, None, CANNOT_RUN, f"could not start: {exc}")
                fd = log_fds.pop(spec.rank)
                if fd is not None:
                    os.write(fd, f"safelaunch: could not start {spec.argv[0]}: {exc}\n".encode())
                    os.close(fd)
        return log_fds

    def _start_threads(self, log_fds: dict[int, int | None]) -> None:
        self._writer.start()
        if self._logs_ok:
            self._filtered.update(filtered_logs(self._plan))
        for rank, started in self._ranks.items():
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
            self._tees[rank] = tee
            threading.Thread(
                target=self._wait_for, args=(started,), name=f"safelaunch-wait-{rank}", daemon=True
            ).start()

    def _wait_for(self, started: StartedRank) -> None:
        returncode = started.process.wait()
        self._events.put((started.spec.rank, returncode, self._clock.monotonic()))

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
            if self._td.running and self._any_failure():
                first = min(
                    (e for e in self._exits.values() if e.returncode != 0),
                    key=lambda e: e.ended_after,
                )
                self._tell_peers(f"rank {first.rank} failed (returncode {first.returncode})")
                # what the survivors were waiting for, before SIGTERM ends them
                self._request_flight_records()
                self._begin_teardown(TeardownCause.RANK_FAILED, signal.SIGTERM)
            now = self._clock.monotonic()
            self._td, kill = teardown.tick(self._td, now)
            if kill:
                for pid in self._ranks_pids():
                    signal_group(pid, signal.SIGKILL)
            if self._td.running:
                reason = poll_all(self._every_tick, self._throttled, self._throttle, now)
                if reason is not None:
                    self._stop(reason)
            if self._live is not None and self._live.due(self._clock.wall()):
                self._live.poll(self._clock.wall(), self._signs.now())
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
        ended_at = self._clock.monotonic() if ended_at is None else ended_at
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
            name = signal.Signals(signum).name
            explains = signal_explains(
                signum, self._td.cause, self._failed_codes(), self._peer_event
            )
            act = teardown.on_signal(self._td, self._interrupt is not None, explains)
            if act == "begin":
                self._interrupt = signum
                self._tell_peers(f"interrupted by {name}")
                self._console.say(
                    f"received {name}: forwarding it to every rank "
                    f"(SIGKILL in {self._plan.shutdown_timeout:g} s; again to kill now)"
                )
                self._begin_teardown(TeardownCause.SIGNAL, signum)
            elif act == "reached first":
                self._signal_reached_ranks_first(signum)
            elif act == "noted":  # already stopping for another reason
                self._interrupt = signum
                self._console.say(
                    f"received {name} while stopping the ranks "
                    f"({self._td.cause}): SIGKILL at the deadline as planned; again to kill now"
                )
            else:
                self._console.say(f"received {name} again: killing now")
                self._td = teardown.kill_now(self._td, self._clock.monotonic())

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
        self._td = teardown.recause(self._td, TeardownCause.SIGNAL)
        self._tell_peers(f"interrupted by {name}")

    def _count_signalled_as_stopped(self) -> None:
        """An interrupt: ranks that died of that very signal just before it are stopped too.

        The teardown began with the launcher's signal; a rank ending of the same signal
        before that (within a tick, or before the launcher's copy arrived: SLURM signals
        the whole step) was ended by the same request, not by a fault of its own.
        """
        began = self._td.began_at
        if self._td.cause is not TeardownCause.SIGNAL or self._interrupt is None or began is None:
            return
        ended = [(e.returncode, e.ended_after) for e in self._exits.values()]
        since = stopped_from(self._interrupt, began - self._t0, ended)
        self._td = teardown.moved_back(self._td, self._t0 + since)

    def _await_own_signal(self) -> None:
        """Every rank died of a signal the launcher handles: wait briefly for its own copy.

        When SLURM signals the whole step the ranks can finish dying before the launcher's
        signal arrives; without this short wait an scancel would read as a rank failure.
        """
        if self._interrupt is not None or not expects_own_signal(
            self._td.cause, self._failed_codes(), self._signals.stopping
        ):
            return
        until = self._clock.monotonic() + OWN_SIGNAL_WAIT
        while self._clock.monotonic() < until and self._interrupt is None:
            self._act_on_signals()
            time.sleep(0.02)

    def _begin_teardown(self, cause: TeardownCause, signum: int) -> None:
        now = self._clock.monotonic()
        self._td = teardown.begin(self._td, cause, signum, now, self._plan.shutdown_timeout)
        for pid in self._ranks_pids():  # exited ranks too: their children share the group
            signal_group(pid, signum)
            signal_group(pid, signal.SIGCONT)  # a stopped rank can only act on it running

    def _request_flight_records(self) -> None:
        live = [s for rank, s in self._ranks.items() if rank not in self._exits]
        with contextlib.suppress(OSError):
            request_records(live, self._plan.attempt_dir, signalled=False)

    # --- watchers -------------------------------------------------------------

    def _watchers(self) -> tuple[list[Watcher], list[Watcher]]:
        """Polled every tick (another node's news), and at the shared throttle's pace."""
        every_tick: list[Watcher] = []
        throttled: list[Watcher] = []
        if self._peers is not None:
            every_tick.append(
                PeerWatcher(clock=self._clock, peers=self._peers, progress=self._signs.progress)
            )
        if self._plan.hang_timeout > 0:
            hang = HangWatch(
                clock=self._clock,
                progress=self._signs.progress,
                sample=self._signs.sample,
                sample_every=max(ACTIVITY_EVERY, self._plan.heartbeat_interval),
                timeout=self._plan.hang_timeout,
                interval=self._plan.heartbeat_interval,
            )
            throttled.append(hang)
        if self._plan.rerun is not None:
            box = TimeboxWatch(
                box=self._plan.rerun.timebox, started_at=self._t0, beats=self._signs.beats
            )
            throttled.append(box)
        return every_tick, throttled

    def _stop(self, reason: StopReason) -> None:
        """Act on a watcher's reason: take the evidence, say why, start the teardown."""
        if reason.peer_event is not None:
            self._peer_event = reason.peer_event
        if reason.note is not None:
            self._timebox_note = reason.note
        if reason.cause is TeardownCause.HANG:
            self._declare_hang(list(reason.progress), reason.detected_at, reason.peer_event)
            return
        self._console.say(reason.say)
        self._begin_teardown(reason.cause, signal.SIGTERM)

    def _declare_hang(
        self, progress: list[RankProgress], wall: float, because: str | None = None
    ) -> None:
        self._console.say(
            f"hang on {because}: collecting every rank's stack here too, then stopping"
            if because
            else f"hang: no rank made progress for {self._plan.hang_timeout:g} s "
            "(--hang-timeout); collecting every rank's stack, then stopping the job"
        )
        live = [self._ranks[p.rank] for p in progress]
        self._hang = take_evidence(live, progress, wall, self._plan)
        if because is None:
            self._tell_peers(f"{HANG_WORD} no progress for {self._plan.hang_timeout:g} s")
        self._begin_teardown(TeardownCause.HANG, signal.SIGTERM)

    def _tell_peers(self, what: str) -> None:
        if self._peers is not None:
            self._peers.announce(f"node {self._plan.node}: {what}")

    # --- ending ---------------------------------------------------------------

    def _stop_threads(self) -> None:
        until = self._clock.monotonic() + TEE_DRAIN
        for tee in self._tees.values():
            tee.stop_by(until)
        for tee in self._tees.values():
            tee.join(TEE_DRAIN + 1)
        if self._writer.is_alive():
            self._writer.close(CONSOLE_CLOSE)
        for filtered in self._filtered.values():
            filtered.close()
