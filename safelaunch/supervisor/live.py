"""Live state: what each rank is doing now (for `safelaunch status`), and a light history of
it (for the timeline in report.html / timeline.json, safelaunch.view).

Every second or two the supervisor hands this watcher what it already has (each rank's
heartbeat record, last output, exit); it writes the node's snapshot (rundir/live_file.py). On
several nodes it also publishes that snapshot through the store; node 0 writes the other
nodes' copies beside its own (rendezvous/live_exchange.py), so `status` reads plain files:
no torch, no store client, and nothing that could disturb the job.

The heartbeat records stay in the private (0700) directory; the snapshot holds what
status shows, in a file created like the ranks' logs (the run directory's permissions
decide who can read both). It records where the private directory is, so that the
job's owner (and only they) can ask for stacks.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from safelaunch.hangs.rhythm import Deadline
from safelaunch.plan import DUMP_SIGNAL, LaunchPlan
from safelaunch.rendezvous.live_exchange import Shared, hang_said
from safelaunch.rundir import live_file
from safelaunch.rundir.heartbeat_file import Beat
from safelaunch.rundir.writing import Writer
from safelaunch.supervisor.watchers import PeerHang
from safelaunch.vocab import NodeSnapshotState, RankSnapshotState

FRAMES_SHOWN = 12
MAX_SAMPLES = 600  # per rank and series: the history stays small on a week-long job


class HangState(Protocol):
    """The hang watch's current deadline, and how long this node's ranks have been quiet."""

    @property
    def deadline(self) -> Deadline: ...

    @property
    def quiet(self) -> float: ...


class Sharing(Protocol):
    """Multi-node: this node's snapshot out; node 0: the others' in (NodeWatch)."""

    def share(self, snapshot: str) -> Shared: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RankNow:
    """What the supervisor knows about one rank at this moment."""

    rank: int
    local_rank: int
    pid: int | None
    spawned_at: float | None  # wall clock; None: never started
    bootstrapped: bool
    beat: Beat | None  # its heartbeat record now; None when not bootstrapped or not written
    last_output: float | None
    returncode: int | None  # None while it runs
    ended_at: float | None  # wall clock


@dataclass(slots=True)
class _Lane:
    """One rank's history: when it made progress, its steps and collectives."""

    spans: list[list[float]] = field(default_factory=list)  # [start, end] of progress
    steps: list[list[float]] = field(default_factory=list)  # [time, step]
    seqs: list[list[float]] = field(default_factory=list)  # [time, collective count]
    rendezvous: list[float] = field(default_factory=list)  # [entered, done]


def _append(series: list[list[float]], when: float, value: object) -> None:
    """A sample when the value changed; past MAX_SAMPLES every other one is dropped."""
    if not isinstance(value, int) or (series and series[-1][1] == value):
        return
    series.append([round(when, 3), value])
    if len(series) > MAX_SAMPLES:
        del series[1:-1:2]


class LiveState:
    """Writes the attempt's live snapshot every `every` seconds and keeps its history."""

    def __init__(self, plan: LaunchPlan, write: Writer, sharing: Sharing | None = None) -> None:
        self._plan = plan
        self._write = write
        self._sharing = sharing
        self._node = plan.node or 0
        self._every = min(2.0, max(0.5, plan.heartbeat_interval))
        # Progress closer than this together is one span; a longer gap is a stall.
        self.stall_after = max(5.0, 3 * plan.heartbeat_interval)
        self._next = 0.0
        self._started = time.time()
        self._lanes: dict[int, _Lane] = {w.rank: _Lane() for w in plan.workers}
        self._beats: dict[int, Beat] = {}  # the last whole record of each rank
        self._host = socket.gethostname()
        self.hang: HangState | None = None  # the attempt's hang watch, once built
        self._peer_hangs: dict[int, PeerHang] = {}  # node -> what its last snapshot said
        self._digest: dict[int, PeerHang | None] | None = None  # not node 0: node 0's digest
        try:
            live_file.directory(plan.attempt_dir).mkdir(exist_ok=True)
        except OSError:
            self._write = lambda _path, _text: False  # no run directory: status has nothing

    @property
    def every(self) -> float:
        """Seconds between two snapshots."""
        return self._every

    def due(self, now: float) -> bool:
        return now >= self._next

    def poll(self, now: float, ranks: Sequence[RankNow]) -> None:
        """Sample every rank, write the snapshot, exchange it with the other nodes."""
        self._next = now + self._every
        snapshot = self._snapshot(now, ranks, NodeSnapshotState.RUNNING, None, None)
        text = json.dumps(snapshot)
        self._write(live_file.snapshot(self._plan.attempt_dir, self._node), text)
        if self._sharing is not None:
            shared = self._sharing.share(text)
            for node, other in shared.snapshots.items():
                if node != self._node:
                    self._write(live_file.snapshot(self._plan.attempt_dir, node), other)
                    self._note_peer(node, other)
            if shared.hangs:  # else none published yet, or the store failed: the last stands
                self._digest = {
                    n: None if said is None else PeerHang(deadline=said[0], quiet=said[1])
                    for n, said in shared.hangs.items()
                }

    def _note_peer(self, node: int, text: str) -> None:
        said = hang_said(text)
        if said is not None:  # else not one of ours, or its watch said nothing yet
            self._peer_hangs[node] = PeerHang(deadline=said[0], quiet=said[1])

    def peer_hangs(self) -> dict[int, PeerHang | None]:
        """The other nodes' hang watches as their last shared snapshots said; None: not heard.

        Node 0 has them all; another node has node 0's digest of them, the entries on
        which HangWatch's rules depend (the longest deadlines, the least quiet, the
        first not heard from)."""
        if self._digest is not None:
            return dict(self._digest)
        nodes = int(self._plan.workers[0].env.get("GROUP_WORLD_SIZE", "1"))
        return {n: self._peer_hangs.get(n) for n in range(nodes) if n != self._node}

    def finish(
        self, ranks: Sequence[RankNow], teardown_at: float | None, cause: str | None
    ) -> None:
        """The last snapshot (state `ended`) and the history, for the report's timeline."""
        now = time.time()
        snapshot = self._snapshot(now, ranks, NodeSnapshotState.ENDED, teardown_at, cause)
        self._write(live_file.snapshot(self._plan.attempt_dir, self._node), json.dumps(snapshot))
        history = {
            "schema": live_file.HISTORY_SCHEMA,
            "run_id": self._plan.run.run_id,
            "name": self._plan.attempt_dir.name,
            "node": self._node,
            "started_at": self._started,
            "ended_at": now,
            "teardown_at": teardown_at,
            "teardown_cause": cause,
            "stall_after_s": self.stall_after,
            "ranks": {
                str(r.rank): {
                    "spawned_at": r.spawned_at,
                    "ended_at": r.ended_at,
                    "returncode": r.returncode,
                    "spans": lane.spans,
                    "steps": lane.steps,
                    "collectives": lane.seqs,
                    "rendezvous": lane.rendezvous,
                }
                for r in ranks
                for lane in [self._lanes.setdefault(r.rank, _Lane())]
            },
        }
        self._write(live_file.history(self._plan.attempt_dir, self._node), json.dumps(history))

    def _snapshot(
        self,
        now: float,
        ranks: Sequence[RankNow],
        state: NodeSnapshotState,
        teardown_at: float | None,
        cause: str | None,
    ) -> dict[str, Any]:
        plan = self._plan
        return {
            "schema": live_file.SCHEMA,
            "run_id": plan.run.run_id,
            "name": plan.attempt_dir.name,
            "attempt": plan.attempt,
            "rerun": plan.rerun.name if plan.rerun is not None else None,
            "node": self._node,
            "host": self._host,
            "launcher_pid": os.getpid(),
            "world_size": int(plan.workers[0].env.get("WORLD_SIZE", len(plan.workers))),
            "started_at": self._started,
            "written_at": now,
            "state": state,
            "teardown_at": teardown_at,
            "teardown_cause": cause,
            "hang_timeout_s": plan.hang_timeout,
            # the deadline applied now (auto: learned, hangs/rhythm.py) and why
            "hang_deadline_s": self.hang.deadline.seconds if self.hang else None,
            "hang_deadline_why": self.hang.deadline.shown() if self.hang else None,
            "hang_quiet_s": round(self.hang.quiet, 3) if self.hang else None,
            "heartbeat_interval_s": plan.heartbeat_interval,
            "private_dir": str(plan.heartbeat_dir),  # 0700: readable by the job's owner only
            "dump_signal": int(DUMP_SIGNAL),
            "ranks": [self._rank(now, r) for r in ranks],
        }

    def _rank(self, now: float, rank: RankNow) -> dict[str, Any]:
        beat = rank.beat
        if beat is None:  # not written yet, or caught being replaced: the last one stands
            beat = self._beats.get(rank.rank)
        else:
            self._beats[rank.rank] = beat
        # Not hang.last_progress: its start-up allowance is patience, not a time something
        # happened, and this is shown and drawn as one.
        seen = [t for t in (rank.last_output, beat and beat.since) if t]
        if rank.returncode is None and seen:  # before any sign of life it is starting up
            self._sample(rank.rank, now, min(max(seen), now), beat)
        signs = [t for t in (rank.spawned_at, *seen) if t]
        progress = min(max(signs), now) if signs else None
        return {
            "rank": rank.rank,
            "local_rank": rank.local_rank,
            "pid": rank.pid,
            "state": RankSnapshotState.NOT_STARTED
            if rank.spawned_at is None
            else RankSnapshotState.RUNNING
            if rank.returncode is None
            else RankSnapshotState.EXITED,
            "returncode": rank.returncode,
            "spawned_at": rank.spawned_at,
            "ended_at": rank.ended_at,
            "bootstrapped": rank.bootstrapped,
            "beat_at": beat.time if beat else None,
            "last_progress": progress,
            "last_output": rank.last_output,
            "step": beat.step if beat else None,
            "optimizer_steps": beat.optimizer_steps if beat else None,
            "collectives": beat.seq if beat else None,
            "busy": bool(beat and beat.busy),
            "frames": [list(f) for f in beat.frames[:FRAMES_SHOWN]] if beat else [],
        }

    def _sample(
        self,
        rank: int,
        now: float,
        progress: float,
        beat: Beat | None,
    ) -> None:
        lane = self._lanes.setdefault(rank, _Lane())
        if lane.spans and progress - lane.spans[-1][1] <= self.stall_after:
            lane.spans[-1][1] = round(progress, 3)
        elif not lane.spans or progress > lane.spans[-1][1]:
            lane.spans.append([round(progress, 3), round(progress, 3)])
            if len(lane.spans) > MAX_SAMPLES:
                lane.spans[1:3] = [[lane.spans[1][0], lane.spans[2][1]]]
        if beat is None:
            return
        explicit = beat.step if beat.step is not None else beat.optimizer_steps
        _append(lane.steps, now, explicit)
        _append(lane.seqs, now, beat.seq)
        rendezvous = any(function == "init_process_group" for _, _, function in beat.frames)
        if rendezvous and not lane.rendezvous:
            lane.rendezvous = [round(beat.time, 3)]
        if beat.seq is not None and len(lane.rendezvous) == 1:
            lane.rendezvous.append(round(beat.time, 3))
        elif beat.seq is not None and not lane.rendezvous:
            lane.rendezvous = [round(beat.time, 3), round(beat.time, 3)]
