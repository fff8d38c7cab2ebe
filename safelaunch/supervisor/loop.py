"""One attempt: start the ranks (workers.py), watch them, tear down, sweep.

Teardown follows Supervisor's model: the handler only records a signal, the
loop acts; escalation is one shared monotonic deadline compared each tick
(SIGTERM, then SIGKILL when it passes), honoured on every path.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from dataclasses import replace

from safelaunch.console import Console
from safelaunch.hangs.detection import ALL_SEEN, HangEvidence, RankProgress, Survivors, Unseen
from safelaunch.hangs.rhythm import Deadline, fixed
from safelaunch.hangs.stack_evidence import take_evidence
from safelaunch.hangs.survivors import take_survivors
from safelaunch.plan import LaunchPlan
from safelaunch.rendezvous import stops
from safelaunch.rendezvous.stops import NodeStop, StopKind
from safelaunch.rundir.writing import Writer
from safelaunch.supervisor import teardown
from safelaunch.supervisor.attempt_record import AttemptRecord, PeerWatch
from safelaunch.supervisor.ending import kill_everything, sweep_strays
from safelaunch.supervisor.interrupts import (
    OWN_SIGNAL_WAIT,
    expects_own_signal,
    signal_explains,
    stopped_from,
)
from safelaunch.supervisor.live import LiveState
from safelaunch.supervisor.procs import reap_strays, signal_group, signal_pids
from safelaunch.supervisor.rank_signs import RankSigns
from safelaunch.supervisor.signals import SignalReceiver
from safelaunch.supervisor.teardown import SignalAct, TeardownCause
from safelaunch.supervisor.watch_set import watch_set
from safelaunch.supervisor.watchers import (
    Clock,
    StopReason,
    SystemClock,
    peer_stop,
    poll_all,
)
from safelaunch.supervisor.workers import Workers

# A multi-node hang: how long a node waits for the others' stacks before it stops its ranks
# (they poll for the announcement every 0.5 s, then dump); a lost node never answers.
EVIDENCE_WAIT = 5.0


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
    while_ranks_start: Callable[[], None] | None = None,
) -> AttemptRecord:
    """Run the attempt to its end; every process it started is gone on return.

    `write_file`: how files in the run directory are written (the report's helper); with
    it, the attempt's live state is kept for `safelaunch status` and the timeline.
    `while_ranks_start`: called once the ranks are spawned and teed, before the watching
    begins (the launcher imports what it needs afterwards there); what it raises ends the
    ranks like any other error here.
    """
    live = LiveState(plan, write_file, peers) if write_file is not None and logs_ok else None
    attempt = _Attempt(plan, console, signals, logs_ok, keeper_pid, peers, live, clock)
    return attempt.run(while_ranks_start)


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
        self._peer_event: NodeStop | None = None
        self._console = console
        self._signals = signals
        self._keeper = {keeper_pid} if keeper_pid else set()
        self._hang: HangEvidence | None = None
        self._survivors: Survivors | None = None
        self._t0 = self._clock.monotonic()
        self._wall0 = self._clock.wall()
        self._workers = Workers(plan, console, self._clock, logs_ok, self._t0)
        self._signs = RankSigns(
            plan=plan,
            clock=self._clock,
            ranks=self._workers.started,
            exits=self._workers.exits,
            tees=self._workers.tees,
            spawned_at=self._workers.spawned_at,
            wall0=self._wall0,
        )
        self._td = teardown.RUNNING
        self._interrupt: int | None = None
        self._timebox_note: str | None = None
        self._watch_set = watch_set(
            plan=plan,
            clock=self._clock,
            signs=self._signs,
            live=live,
            peers=peers,
            started_at=self._t0,
        )

    def run(self, while_ranks_start: Callable[[], None] | None = None) -> AttemptRecord:
        strays = 0
        woke, self._signals.wake = self._signals.wake, self._workers.wake
        try:
            self._workers.start()
            if while_ranks_start is not None:
                while_ranks_start()
            self._watch()
            self._count_signalled_as_stopped()
            strays = sweep_strays(
                self._plan.run.token, self._keeper, self._plan.shutdown_timeout, self._td.deadline
            )
            if self._live is not None:
                began = None if self._td.began_at is None else self._wall(self._td.began_at)
                self._live.finish(self._signs.now(), began, self._td.cause)
        except BaseException:
            kill_everything(self._workers.started.values(), self._plan.run.token, self._keeper)
            raise
        finally:
            self._signals.wake = woke
            self._workers.stop_threads()
        hang_watch = self._watch_set.hang
        return AttemptRecord(
            plan=self._plan,
            exits=self._workers.ended(),
            teardown_after=None if self._td.began_at is None else self._td.began_at - self._t0,
            teardown_cause=self._td.cause,
            interrupt_signal=self._interrupt,
            hang=self._hang,
            survivors=self._survivors,
            strays_ended=strays,
            log_problems=tuple(self._workers.log_problems),
            duration=self._clock.monotonic() - self._t0,
            timebox_note=self._timebox_note,
            peer_event=self._peer_event,
            hang_deadline=hang_watch.learned if hang_watch is not None else None,
        )

    # --- watching -------------------------------------------------------------

    def _watch(self) -> None:
        while not self._workers.all_ended():
            # stopping: at the monitor interval, for the SIGKILL deadline
            running = self._td.running
            self._workers.collect(self._watch_set.idle if running else self._plan.monitor_interval)
            reap_strays(keep=set(self._workers.pids()) | self._keeper)
            self._act_on_signals()
            if self._td.running and (first := self._workers.first_failure()) is not None:
                if (elsewhere := self._stopped_elsewhere()) is not None:
                    self._stop(elsewhere)
                    # its end counts as of that cause, as a rank's that ends while the
                    # survivors' stacks are taken (_stop); the job verdict weighs both nodes
                    began = self._t0 + first.ended_after - 1e-3
                    self._td = replace(self._td, began_at=min(began, self._td.began_at or began))
                else:
                    self._tell_peers(stops.rank_failed(*self._where, first.rank, first.returncode))
                    # where the survivors were and what they waited for, before SIGTERM ends them
                    self._take_survivors(f"rank {first.rank} failed", first.rank)
                    self._begin_teardown(TeardownCause.RANK_FAILED, signal.SIGTERM)
            now = self._clock.monotonic()
            self._td, kill = teardown.tick(self._td, now)
            if kill:
                for pid in self._workers.pids():
                    signal_group(pid, signal.SIGKILL)
            if self._td.running:
                watching = self._watch_set
                reason = poll_all(watching.every_tick, watching.throttled, watching.throttle, now)
                if reason is not None:
                    self._stop(reason)
            if self._live is not None and self._live.due(self._clock.wall()):
                self._live.poll(self._clock.wall(), self._signs.now())
        self._await_own_signal()

    def _wall(self, monotonic: float) -> float:
        return self._wall0 + (monotonic - self._t0)

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
                signum, self._td.cause, self._workers.failed_codes(), self._peer_event
            )
            act = teardown.on_signal(self._td, self._interrupt is not None, explains)
            if act == SignalAct.BEGIN:
                self._interrupt = signum
                self._tell_peers(stops.interrupted(*self._where, signum))
                self._console.say(
                    f"received {name}: forwarding it to every rank "
                    f"(SIGKILL in {self._plan.shutdown_timeout:g} s; again to kill now)"
                )
                self._begin_teardown(TeardownCause.SIGNAL, signum)
            elif act == SignalAct.REACHED_FIRST:
                self._signal_reached_ranks_first(signum)
            elif act == SignalAct.NOTED:  # already stopping for another reason
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
        live = [s.process.pid for s in self._workers.live()]
        if not self._signals.pass_on:
            self._console.say(
                f"received {name}: SLURM sent it to every process of the step, the ranks "
                "included; not sent again, the job goes on"
            )
            return
        # The rank's process only, not its group: its DataLoader workers would die of it.
        signal_pids(set(live), signum)
        self._console.say(f"received {name}: passed on to {len(live)} rank(s); the job goes on")

    def _signal_reached_ranks_first(self, signum: int) -> None:
        name = signal.Signals(signum).name
        self._console.say(
            f"received {name}, which the ranks had received too: an interrupt, not a rank "
            f"failure (SIGKILL at the deadline, {self._plan.shutdown_timeout:g} s after the first)"
        )
        self._interrupt = signum
        self._td = teardown.recause(self._td, TeardownCause.SIGNAL)
        self._tell_peers(stops.interrupted(*self._where, signum))

    def _count_signalled_as_stopped(self) -> None:
        """An interrupt: ranks that died of that very signal just before it are stopped too.

        The teardown began with the launcher's signal; a rank ending of the same signal
        before that (within a tick, or before the launcher's copy arrived: SLURM signals
        the whole step) was ended by the same request, not by a fault of its own.
        """
        began = self._td.began_at
        if self._td.cause is not TeardownCause.SIGNAL or self._interrupt is None or began is None:
            return
        ended = [(e.returncode, e.ended_after) for e in self._workers.exits.values()]
        since = stopped_from(self._interrupt, began - self._t0, ended)
        self._td = teardown.moved_back(self._td, self._t0 + since)

    def _await_own_signal(self) -> None:
        """Every rank died of a signal the launcher handles: wait briefly for its own copy.

        When SLURM signals the whole step the ranks can finish dying before the launcher's
        signal arrives; without this short wait an scancel would read as a rank failure.
        """
        if self._interrupt is not None or not expects_own_signal(
            self._td.cause, self._workers.failed_codes(), self._signals.stopping
        ):
            return
        until = self._clock.monotonic() + OWN_SIGNAL_WAIT
        while self._clock.monotonic() < until and self._interrupt is None:
            self._act_on_signals()
            time.sleep(0.02)

    def _begin_teardown(self, cause: TeardownCause, signum: int) -> None:
        now = self._clock.monotonic()
        self._td = teardown.begin(self._td, cause, signum, now, self._plan.shutdown_timeout)
        for pid in self._workers.pids():  # exited ranks too: their children share the group
            signal_group(pid, signum)
            signal_group(pid, signal.SIGCONT)  # a stopped rank can only act on it running

    def _take_survivors(self, after: str, failed_rank: int | None) -> None:
        live = self._workers.live()
        with contextlib.suppress(OSError):
            progress = self._signs.progress() if live else []
            self._survivors = take_survivors(live, progress, self._plan, after, failed_rank)

    # --- watchers -------------------------------------------------------------

    def _stop(self, reason: StopReason) -> None:
        """Act on a watcher's reason: take the evidence, say why, start the teardown."""
        if reason.peer_event is not None:
            self._peer_event = reason.peer_event
        if reason.note is not None:
            self._timebox_note = reason.note
        if reason.cause is TeardownCause.HANG:
            self._declare_hang(
                list(reason.progress), reason.detected_at, reason.peer_event, reason.unseen
            )
            return
        self._console.say(reason.say)
        decided = self._clock.monotonic()
        if reason.cause is TeardownCause.PEER and reason.peer_event is not None:
            self._take_survivors(reason.peer_event.shown, None)
        self._begin_teardown(reason.cause, signal.SIGTERM)
        if reason.cause is TeardownCause.PEER:
            # the cause is on another node: a rank that ends while its stacks are taken
            # ends of that cause (its peers there are gone), as if stopped then
            self._td = replace(self._td, began_at=decided)

    def _declare_hang(
        self,
        progress: list[RankProgress],
        wall: float,
        because: NodeStop | None = None,
        unseen: Unseen = ALL_SEEN,
    ) -> None:
        deadline = self.hang_deadline or fixed(self._plan.hang_timeout)
        self._console.say(
            f"hang on {because}: collecting every rank's stack here too, then stopping"
            if because
            else f"hang: no rank made progress for {deadline.shown()}; "
            "collecting every rank's stack, then stopping the job"
        )
        if because is None:  # first: the other nodes take their ranks' stacks meanwhile
            self._tell_peers(stops.hang(*self._where, deadline.seconds))
        live = [self._workers.started[p.rank] for p in progress]
        self._hang = take_evidence(live, progress, wall, self._plan, unseen, deadline)
        if self._peers is not None:  # no node stops its ranks before the others have looked
            self._peers.evidence_taken()
            self._peers.others_have_evidence(EVIDENCE_WAIT)
        self._begin_teardown(TeardownCause.HANG, signal.SIGTERM)

    def _stopped_elsewhere(self) -> StopReason | None:
        """A rank here failed: had another node already stopped the attempt (not for a
        hang, whose evidence this node still takes, nor to admit nodes, which would hide
        a failure)? Then this rank most likely failed of it, its peers there stopped first
        (seen: node 1 SIGTERMed, node 0's rank 0 read "Connection reset by peer" before
        node 0 had looked at the announcement)."""
        event = self._peers.stopped_elsewhere() if self._peers is not None else None
        if event is None or event.kind in (StopKind.HANG, StopKind.NODES_JOINING):
            return None
        return peer_stop(event)

    def _tell_peers(self, stop: NodeStop) -> None:
        if self._peers is not None:
            self._peers.announce(stop)

    @property
    def hang_deadline(self) -> Deadline | None:
        """The deadline the hang watch applies now; None when hang detection is off."""
        return self._watch_set.hang.deadline if self._watch_set.hang is not None else None

    @property
    def _where(self) -> tuple[int, int]:
        """(node, attempt) of a stop this node announces (with peers, a plan names its node)."""
        return self._plan.node or 0, self._plan.attempt
