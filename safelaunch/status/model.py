"""What `safelaunch status` shows, judged from the nodes' snapshots: pure, with a given clock.

The snapshots are JSON written by the launchers (safelaunch/supervisor/live.py); every
field is read defensively, since a file on disk is input like any other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from safelaunch.ranktext import ranks_label
from safelaunch.userframe import user_frame
from safelaunch.vocab import NodeSnapshotState, RankSnapshotState, StrEnum


class LiveRankState(StrEnum):
    """What a rank is doing, as `safelaunch status` shows it."""

    STARTING = "starting"
    RENDEZVOUS = "rendezvous"
    COMPUTING = "computing"
    IN_COLLECTIVE = "in collective"
    RUNNING = "running"
    FROZEN = "frozen"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"
    NOT_STARTED = "not started"


class JobState(StrEnum):
    """The job as its snapshots show it: a launcher silent too long is "launcher gone"."""

    RUNNING = "running"
    ENDED = "ended"
    LAUNCHER_GONE = "launcher gone"


LAUNCHER_GONE_AFTER = 30.0  # s without a new snapshot from a running launcher
HANG_HINT = 0.5  # of --hang-timeout without progress anywhere: say a hang is suspected
STEPS_BEHIND = 2  # a rank this many steps behind the leaders is called a straggler
# Ranks ahead by a collective must have waited this long before the one behind is called a
# straggler: in a healthy job the count differs for a moment at every step.
STRAGGLER_WAIT = 5.0
_COLLECTIVES = (
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier", "all_to_all",
    "reduce", "gather", "scatter", "send", "recv", "wait", "monitored_barrier",
    "_all_gather_base", "_reduce_scatter_base", "all_gather_into_tensor",
)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """A rank's process tree (the rank and its children) as measured on this host."""

    cpu_percent: float | None = None
    rss_bytes: int | None = None
    gpu_mib: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RankRow:
    """One line of the table."""

    rank: int
    node: int
    host: str
    pid: int | None
    state: LiveRankState
    returncode: int | None
    step: int | None
    step_inferred: bool  # counted optimizer steps, not safelaunch.heartbeat(step=)
    collectives: int | None
    idle_s: float | None  # since the last progress (stack, step, collective or output)
    frame: str | None  # innermost frame in the user's code: path:line in function
    usage: Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStatus:
    """The whole job as this node's files show it."""

    run_id: str
    name: str  # attempt_N, or an isolation rerun's directory
    attempt: int
    state: JobState
    elapsed_s: float
    hang_timeout_s: float  # the deadline applied now: auto's learned one, or --hang-timeout N
    world_size: int
    nodes: tuple[int, ...]  # the nodes whose snapshots were found
    ranks: tuple[RankRow, ...]
    suspicions: tuple[str, ...]
    snapshot_age_s: float
    hang_deadline_why: str = ""  # auto: how the deadline was learned


def _num(record: Mapping[str, Any], key: str) -> float | None:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _int(record: Mapping[str, Any], key: str) -> int | None:
    value = record.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _frames(record: Mapping[str, Any]) -> list[tuple[str, int, str]]:
    frames = []
    for entry in record.get("frames") or []:
        if isinstance(entry, list) and len(entry) == 3:
            frames.append((str(entry[0]), _int({"n": entry[1]}, "n") or 0, str(entry[2])))
    return frames


def _state(record: Mapping[str, Any], now: float, interval: float, job: JobState) -> LiveRankState:
    returncode = _int(record, "returncode")
    if record.get("state") == RankSnapshotState.NOT_STARTED:
        return LiveRankState.NOT_STARTED
    if record.get("state") == RankSnapshotState.EXITED and returncode is not None:
        if returncode == 0:
            return LiveRankState.SUCCEEDED
        return LiveRankState.KILLED if returncode < 0 else LiveRankState.FAILED
    beat_at = _num(record, "beat_at")
    if beat_at is None:
        return LiveRankState.STARTING if record.get("bootstrapped") else LiveRankState.RUNNING
    if job == JobState.RUNNING and now - beat_at > 3 * interval + 0.5:
        return LiveRankState.FROZEN  # the heartbeat thread could not run: SIGSTOP, or native
    frames = _frames(record)
    if any(function == "init_process_group" for _, _, function in frames):
        return LiveRankState.RENDEZVOUS
    if record.get("busy"):
        return LiveRankState.COMPUTING
    if any("distributed" in path and function in _COLLECTIVES for path, _, function in frames):
        return LiveRankState.IN_COLLECTIVE
    return LiveRankState.RUNNING


_ENDED = (
    LiveRankState.SUCCEEDED,
    LiveRankState.FAILED,
    LiveRankState.KILLED,
    LiveRankState.NOT_STARTED,
)


def _row(
    record: Mapping[str, Any], node: Mapping[str, Any], now: float, usage: Mapping[int, Usage]
) -> RankRow:
    interval = _num(node, "heartbeat_interval_s") or 1.0
    job = _job_state(node, now)
    step = _int(record, "step")
    inferred = _int(record, "optimizer_steps")
    progress = _num(record, "last_progress")
    state = _state(record, now, interval, job)
    ended = state in _ENDED or job != JobState.RUNNING
    pid = _int(record, "pid")
    return RankRow(
        rank=_int(record, "rank") or 0,
        node=_int(node, "node") or 0,
        host=str(node.get("host", "?")),
        pid=pid,
        state=state,
        returncode=_int(record, "returncode"),
        step=step if step is not None else inferred,
        step_inferred=step is None and inferred is not None,
        collectives=_int(record, "collectives"),
        idle_s=None if progress is None or ended else max(0.0, now - progress),
        frame=user_frame(_frames(record), fallback=True),
        usage=usage.get(pid, Usage()) if pid is not None and not ended else Usage(),
    )


def _job_state(node: Mapping[str, Any], now: float) -> JobState:
    if node.get("state") == NodeSnapshotState.ENDED:
        return JobState.ENDED
    written = _num(node, "written_at") or 0.0
    if now - written > LAUNCHER_GONE_AFTER:
        return JobState.LAUNCHER_GONE
    return JobState.RUNNING


def suspicions(rows: Sequence[RankRow], hang_timeout: float) -> list[str]:
    """Stragglers and hang hints, in words; none for a healthy job, however quiet."""
    live = [r for r in rows if r.idle_s is not None]
    said: list[str] = []
    frozen = [r.rank for r in live if r.state == LiveRankState.FROZEN]
    if frozen:
        said.append(
            f"{ranks_label(frozen)}: heartbeat stopped (stopped with SIGSTOP, or native code "
            "holding the GIL)"
        )
    counted = [r for r in live if r.collectives is not None]
    if len(counted) > 1:
        low = min(r.collectives or 0 for r in counted)
        high = max(r.collectives or 0 for r in counted)
        behind = [r.rank for r in counted if r.collectives == low]
        ahead = [r for r in counted if r.collectives == high]
        ahead_waiting = all(
            r.state != LiveRankState.COMPUTING and (r.idle_s or 0.0) >= STRAGGLER_WAIT
            for r in ahead
        )
        if high > low and ahead_waiting:
            said.append(
                f"straggler: {ranks_label(behind)} at collective #{low}, the others at #{high} "
                "wait for it"
            )
    stepped = [r for r in live if r.step is not None]
    if len(stepped) > 1:
        top = max(r.step or 0 for r in stepped)
        slow = [r.rank for r in stepped if (r.step or 0) <= top - STEPS_BEHIND]
        if slow:
            said.append(f"straggler: {ranks_label(slow)} {STEPS_BEHIND}+ steps behind step {top}")
    if live and hang_timeout > 0:
        quiet = min(r.idle_s or 0.0 for r in live)
        if quiet >= HANG_HINT * hang_timeout:
            said.append(
                f"hang suspected: no rank made progress for {quiet:.0f} s "
                f"(safelaunch declares a hang at {hang_timeout:g} s)"
            )
    return said


def judge(
    snapshots: Sequence[Mapping[str, Any]], now: float, usage: Mapping[int, Usage]
) -> JobStatus:
    """The job's status from every node's snapshot (`usage`: this host's measurements)."""
    first = snapshots[0]
    rows = sorted(
        (
            _row(record, node, now, usage)
            for node in snapshots
            for record in node.get("ranks", [])
            if isinstance(record, dict)
        ),
        key=lambda r: r.rank,
    )
    states = {_job_state(node, now) for node in snapshots}
    state = next(
        (s for s in (JobState.RUNNING, JobState.LAUNCHER_GONE) if s in states), JobState.ENDED
    )
    started = min(_num(node, "started_at") or now for node in snapshots)
    written = max(_num(node, "written_at") or 0.0 for node in snapshots)
    ended = max(_num(node, "written_at") or now for node in snapshots)
    hang_timeout = _num(first, "hang_timeout_s") or 0.0
    # auto: the longest deadline any node applies now (each learns from its own ranks)
    learned = [(_num(n, "hang_deadline_s"), n.get("hang_deadline_why")) for n in snapshots]
    known = [(s, str(w)) for s, w in learned if s is not None and isinstance(w, str)]
    deadline_why = ""
    if hang_timeout > 0 and known:
        hang_timeout, deadline_why = max(known)
    return JobStatus(
        run_id=str(first.get("run_id", "?")),
        name=str(first.get("name", "?")),
        attempt=_int(first, "attempt") or 0,
        state=state,
        elapsed_s=(now if state == JobState.RUNNING else ended) - started,
        hang_timeout_s=hang_timeout,
        world_size=_int(first, "world_size") or len(rows),
        nodes=tuple(_int(node, "node") or 0 for node in snapshots),
        ranks=tuple(rows),
        suspicions=tuple(suspicions(rows, hang_timeout) if state == JobState.RUNNING else ()),
        snapshot_age_s=max(0.0, now - written),
        hang_deadline_why=deadline_why,
    )


def short_frame(frame: str | None) -> str:
    """`train.py:27 in load_batch` from a full path."""
    if frame is None:
        return "-"
    path, _, rest = frame.partition(":")
    return os.path.basename(path) + ":" + rest
