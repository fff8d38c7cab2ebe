"""The timeline's model: every attempt and rerun of a run, one lane per rank, in run time.

Built from the same records as report.json (each attempt's report.json) plus the light
history the launcher kept while the ranks ran (rundir/live_file.py: when each
rank made progress, its steps and collectives, its rendezvous). Pure reading: files in,
frozen records out; a missing or damaged file only leaves its part of the page empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safelaunch.ranktext import ranks_label
from safelaunch.rundir import live_file, report_file


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    """One rank in one attempt: times in seconds since the run started."""

    attempt: str
    rank: int
    start: float
    end: float
    state: str  # report.json's: succeeded / failed / stopped / not started
    ending: str  # `exited with code 1`, `SIGTERM`, ...
    log: str  # relative to the run directory
    spans: tuple[tuple[float, float], ...]  # progress
    stalls: tuple[tuple[float, float], ...]  # no progress for longer than stall_after
    steps: tuple[tuple[float, int], ...]
    collectives: tuple[tuple[float, int], ...]
    rendezvous: tuple[float, ...]  # (entered, done), (done,), or ()
    culprit: bool  # the hang's culprit, or the failure's root cause
    where: str | None  # for a hang: where this rank was


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """An attempt or isolation rerun, summed up as report.json says."""

    name: str
    start: float
    end: float
    status: str
    exit_code: int | None
    headline: str
    details: tuple[str, ...]
    hang_at: float | None  # when the hang was declared
    culprits: tuple[int, ...]
    segments: tuple[Segment, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeline:
    """The whole run."""

    run_id: str
    started_at: float  # wall clock of t = 0
    attempts: tuple[Attempt, ...]

    @property
    def ranks(self) -> list[int]:
        return sorted({s.rank for a in self.attempts for s in a.segments})

    @property
    def end(self) -> float:
        return max((a.end for a in self.attempts), default=0.0)


def _num(value: object, default: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return float(value)


def _pairs(raw: object, t0: float) -> list[tuple[float, float]]:
    pairs = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, list) and len(item) == 2:
            pairs.append((_num(item[0]) - t0, _num(item[1])))
    return pairs


def _stalls(
    spans: list[tuple[float, float]], end: float, stall_after: float
) -> list[tuple[float, float]]:
    """Gaps without progress longer than `stall_after`, up to the rank's end.

    Not before the first sign of life: that is python starting and imports.
    """
    if not spans:
        return []
    stalls: list[tuple[float, float]] = []
    last = spans[0][0]
    for begin, finish in spans:
        if begin - last > stall_after:
            stalls.append((last, begin))
        last = max(last, finish)
    if end - last > stall_after:
        stalls.append((last, end))
    return stalls


def _ending(rank: Mapping[str, Any]) -> str:
    if rank.get("signal"):
        return str(rank["signal"])
    if rank.get("exit_code") is not None:
        return f"exited with code {rank['exit_code']}"
    return str(rank.get("state", "?"))


def _where(report: Mapping[str, Any]) -> dict[int, str]:
    places: dict[int, str] = {}
    hang = report.get("hang") or {}
    for group in hang.get("groups") or []:
        where = f"{group.get('activity')} ({group.get('location') or '?'})"
        for rank in group.get("ranks") or []:
            places[int(rank)] = where
    return places


def _verdict(report: Mapping[str, Any]) -> Mapping[str, Any]:
    """The arbiter's verdict: the job's (every node's evidence) where there is one."""
    job = report.get("job")
    if isinstance(job, Mapping) and job.get("verdict"):
        return job
    diagnosis = report.get("diagnosis")
    return diagnosis if isinstance(diagnosis, Mapping) else {}


def _culprits(report: Mapping[str, Any]) -> tuple[int, ...]:
    named = _verdict(report).get("culprits")
    if isinstance(named, list) and named:
        return tuple(int(c["rank"]) for c in named if isinstance(c, Mapping) and "rank" in c)
    hang = report.get("hang")
    if hang and hang.get("culprits"):
        return tuple(int(r) for r in hang["culprits"])
    cause = (report.get("diagnosis") or {}).get("root_cause_rank")
    return (int(cause),) if isinstance(cause, int) and report.get("status") != "succeeded" else ()


def _headline(report: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    status = str(report.get("status", "?"))
    diagnosis = report.get("diagnosis") or {}
    hang = report.get("hang")
    details: list[str] = []
    if hang:
        culprits = ",".join(str(r) for r in hang.get("culprits") or [])
        headline = f"hung: no progress for {_num(hang.get('stuck_for_s')):.0f} s" + (
            f"; likely culprit rank {culprits}: {hang.get('reason')}" if culprits else ""
        )
        details.extend(
            f"{ranks_label(_listed(g.get('ranks')))}: {g.get('location')}" for g in hang["groups"]
        )
    elif status == "failed" and diagnosis.get("root_cause_rank") is not None:
        headline = f"failed: rank {diagnosis['root_cause_rank']} ({diagnosis.get('class')})"
        details.extend(str(diagnosis[k]) for k in ("error", "location") if diagnosis.get(k))
    else:
        headline = status
    verdict = _verdict(report).get("verdict")
    if verdict:  # who broke it, on what evidence: first
        details.insert(0, str(verdict))
    if diagnosis.get("summary"):
        details.append(str(diagnosis["summary"]))
    return headline, tuple(details)


def _attempt(
    attempt_dir: Path, report: dict[str, Any], history: dict[str, Any], t0: float, after: float
) -> Attempt:
    """`after`: where the attempt starts when it has no history (logs were off for it)."""
    lanes = history.get("ranks") or {}
    started = _num(history.get("started_at"), t0 + after) - t0
    duration = _num(report.get("duration_s"))
    stall_after = _num(history.get("stall_after_s"), 5.0)
    culprits = _culprits(report)
    places = _where(report)
    teardown = history.get("teardown_at")
    hang_at = _num(teardown) - t0 if report.get("hang") and teardown else None
    segments = []
    for rank in report.get("ranks") or []:
        number = int(rank.get("rank", 0))
        lane = lanes.get(str(number)) or {}
        start = _num(lane.get("spawned_at"), t0 + started) - t0
        end = started + _num(rank.get("ended_after_s"), duration)
        spans = [(a, b - t0) for a, b in _pairs(lane.get("spans"), t0)]
        log = Path(str(rank.get("log", "")))
        segments.append(
            Segment(
                attempt=attempt_dir.name,
                rank=number,
                start=start,
                end=max(end, start),
                state=str(rank.get("state", "?")),
                ending=_ending(rank),
                log=f"{attempt_dir.name}/{log.name}",
                spans=tuple(spans),
                stalls=tuple(_stalls(spans, end, stall_after)),
                steps=tuple((t, int(v)) for t, v in _pairs(lane.get("steps"), t0)),
                collectives=tuple((t, int(v)) for t, v in _pairs(lane.get("collectives"), t0)),
                rendezvous=tuple(_num(t) - t0 for t in lane.get("rendezvous") or []),
                culprit=number in culprits,
                where=places.get(number),
            )
        )
    headline, details = _headline(report)
    exit_code = report.get("exit_code")
    return Attempt(
        name=attempt_dir.name,
        start=started,
        end=max([started + duration, *(s.end for s in segments)]),
        status=str(report.get("status", "?")),
        exit_code=exit_code if isinstance(exit_code, int) else None,
        headline=headline,
        details=details,
        hang_at=hang_at,
        culprits=culprits,
        segments=tuple(segments),
    )


def read_timeline(run_dir: Path) -> Timeline:
    """Every attempt, then every rerun, under `run_dir` that has a report.json, in time order."""
    found = []
    for attempt_dir in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        report = report_file.read_report(attempt_dir)
        if report is not None:
            found.append((attempt_dir, report, live_file.read_history(attempt_dir)))
    starts = [_num(h.get("started_at")) for _, _, h in found if h.get("started_at")]
    t0 = min(starts) if starts else 0.0
    attempts: list[Attempt] = []
    for attempt_dir, report, history in found:
        after = max((a.end for a in attempts), default=0.0)
        attempts.append(_attempt(attempt_dir, report, history, t0, after))
    # the job's attempts, then the isolation reruns (isolate_*) that followed: each in time order
    attempts.sort(key=lambda a: (not a.name.startswith("attempt_"), a.start))
    run_id = str(found[0][1].get("run_id", run_dir.name)) if found else run_dir.name
    return Timeline(run_id=run_id, started_at=t0, attempts=tuple(attempts))


def _listed(value: object) -> list[object]:
    """A report's rank list as a list (read back from a file: anything else is one item)."""
    return list(value) if isinstance(value, list) else [value]
