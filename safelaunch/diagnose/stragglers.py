"""Stragglers: the rank that arrives last at the collectives, and where it spends its time.

A slow rank hides in per-rank step times (everybody waits for it, so every rank's step
is as slow as its own). torch's flight recorder stamps each collective with the time
each rank called it (`time_created_ns`), so the arrival order is exact. Read from the
records the ranks write (at destroy_process_group on a job that ends well, on demand
otherwise): plain JSON, so no torch and no subprocess here. Where the time goes comes
from the heartbeat's sampled stacks, counted per phase in the same record
(safelaunch/rank/phases.py).

Named only when one rank is last at most collectives AND keeps the others waiting a
material share of a step: a balanced job's order is noise, its waits small.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safelaunch.rundir import flight_file

MIN_COLLECTIVES = 8  # fewer compared collectives say nothing
LAST_SHARE = 0.75  # last at least this share of them (2 balanced ranks: ~2% by chance at 20)
MATERIAL = 0.05  # and the others wait for it at least this share of the time
MIN_WAIT_S = 0.002  # and at least this long (clock and scheduling noise)
PHASE_NAMES = {"data": "data loading", "compute": "compute", "collective": "in collectives"}

FlightRecord = Mapping[str, Any]  # one rank's flight record, with safelaunch's additions


@dataclass(frozen=True, slots=True, kw_only=True)
class RankArrival:
    """How one rank arrived at the compared collectives."""

    rank: int
    last: int  # collectives at which it was the last to arrive
    mean_lag_s: float  # after the first rank to arrive, on average
    phases: tuple[tuple[str, float], ...]  # share of its sampled stacks per phase


@dataclass(frozen=True, slots=True, kw_only=True)
class Straggler:
    """The rank that slows everybody."""

    rank: int
    last: int
    compared: int
    wait_s: float  # how long the others waited for it, on average, when it was last
    wait_share: float  # all those waits over the span of the compared collectives
    phase: str | None  # where it spends more of its time than the others do
    place: str | None  # the place most sampled in that phase


@dataclass(frozen=True, slots=True, kw_only=True)
class Arrivals:
    """The ranks' arrival order at the collectives of one attempt."""

    compared: int
    ranks: tuple[RankArrival, ...]
    straggler: Straggler | None


def read_records(directory: Path) -> dict[int, FlightRecord]:
    """rank -> the record it wrote (safelaunch's JSON records only)."""
    return {rank: dict(record) for rank, record in flight_file.read_ours(directory).items()}


def _members(records: Mapping[int, FlightRecord]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for record in records.values():
        for name, config in (record["safelaunch"].get("pg_config") or {}).items():
            try:
                ranks = [int(r) for r in json.loads(str(config.get("ranks", "[]")))]
            except (ValueError, TypeError):
                continue
            if len(ranks) > 1:
                groups[str(name)] = ranks
    return groups


def arrival_times(records: Mapping[int, FlightRecord]) -> list[dict[int, float]]:
    """Per collective called by every member of its group alike: rank -> when (seconds)."""
    seen: dict[tuple[str, int], dict[int, tuple[str, float]]] = {}
    for rank, record in records.items():
        for entry in record.get("entries", []):
            if entry.get("is_p2p"):
                continue
            key = (str(entry["process_group"][0]), int(entry["collective_seq_id"]))
            call = str(entry.get("profiling_name"))
            seen.setdefault(key, {})[rank] = (call, int(entry["time_created_ns"]) / 1e9)
    groups = _members(records)
    found = []
    for (group, _), calls in sorted(seen.items()):
        members = groups.get(group)
        if not members or set(calls) != set(members):
            continue
        if len({call for call, _ in calls.values()}) == 1:
            found.append({rank: when for rank, (_, when) in calls.items()})
    return found


def _mean(values: Iterable[float]) -> float:
    # statistics (with fractions and decimal) costs ~2.5 ms to import, and only a job whose
    # ranks met in collectives gets here: a launch of any other job never loads it
    import statistics

    return statistics.mean(values)


def _phases(record: FlightRecord) -> dict[str, float]:
    counts = ((record.get("safelaunch") or {}).get("phases") or {}).get("counts") or {}
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()} if total else {}


def _top_place(record: FlightRecord, phase: str) -> str | None:
    places = ((record.get("safelaunch") or {}).get("phases") or {}).get("places") or {}
    seen: dict[str, int] = places.get(phase) or {}
    return max(seen, key=lambda where: seen[where]) if seen else None


def _cause(records: Mapping[int, FlightRecord], rank: int) -> str | None:
    """The phase in which the rank spends a larger share of its samples than the others."""
    own = _phases(records[rank])
    others = [_phases(r) for k, r in records.items() if k != rank and _phases(r)]
    if not own or not others:
        return None
    excess = {
        phase: share - _mean(o.get(phase, 0.0) for o in others)
        for phase, share in own.items()
        if phase != "collective"  # waiting is the others' symptom, not the straggler's cause
    }
    best = max(excess, key=lambda p: excess[p], default=None)
    return best if best is not None and excess[best] > 0 else None


def analyse(records: Mapping[int, FlightRecord]) -> Arrivals | None:
    """Arrival order per rank, and the straggler when there is one; None without collectives."""
    times = arrival_times(records)
    if not times:
        return None
    last = [max(t, key=lambda r: t[r]) for t in times]
    ranks = tuple(
        RankArrival(
            rank=rank,
            last=last.count(rank),
            mean_lag_s=_mean(t[rank] - min(t.values()) for t in times if rank in t),
            phases=tuple(sorted(_phases(records[rank]).items())),
        )
        for rank in sorted(records)
        if any(rank in t for t in times)
    )
    return Arrivals(compared=len(times), ranks=ranks, straggler=_straggler(records, times, last))


def _straggler(
    records: Mapping[int, FlightRecord], times: list[dict[int, float]], last: list[int]
) -> Straggler | None:
    if len(times) < MIN_COLLECTIVES:
        return None
    rank = max(set(last), key=last.count)
    if last.count(rank) < LAST_SHARE * len(times):
        return None
    waits = [
        t[rank] - max(v for r, v in t.items() if r != rank)
        for t, who in zip(times, last, strict=True)
        if who == rank
    ]
    wait = _mean(waits)
    span = max(max(t.values()) for t in times) - min(min(t.values()) for t in times)
    share = sum(waits) / span if span > 0 else 0.0
    if wait < MIN_WAIT_S or share < MATERIAL:
        return None
    phase = _cause(records, rank)
    return Straggler(
        rank=rank,
        last=last.count(rank),
        compared=len(times),
        wait_s=wait,
        wait_share=share,
        phase=phase,
        place=_top_place(records[rank], phase) if phase else None,
    )


def summary(arrivals: Arrivals | None) -> str | None:
    """The one summary line, when there is a straggler."""
    found = arrivals.straggler if arrivals is not None else None
    if arrivals is None or found is None:
        return None
    line = (
        f"straggler: rank {found.rank} arrived last at {found.last} of {found.compared} "
        f"collectives; the others waited {found.wait_s * 1000:.0f} ms for it each time"
    )
    line += f" ({found.wait_share:.0%} of the time)"
    if found.phase is not None:
        own = dict(next(r.phases for r in arrivals.ranks if r.rank == found.rank))
        others = [
            dict(r.phases).get(found.phase, 0.0)
            for r in arrivals.ranks
            if r.rank != found.rank and r.phases
        ]
        line += (
            f"; it spends more time in {PHASE_NAMES.get(found.phase, found.phase)}: "
            f"{own.get(found.phase, 0.0):.0%} of its samples"
        )
        if others:
            line += f" vs {_mean(others):.0%} on the others"
        if found.place:
            line += f", mostly at {found.place}"
    return line


def record(arrivals: Arrivals | None) -> dict[str, Any] | None:
    """report.json's `stragglers`."""
    if arrivals is None:
        return None
    found = arrivals.straggler
    return {
        "compared": arrivals.compared,
        "ranks": [
            {
                "rank": r.rank,
                "last": r.last,
                "mean_lag_ms": round(r.mean_lag_s * 1000, 3),
                "phases": {phase: round(share, 3) for phase, share in r.phases},
            }
            for r in arrivals.ranks
        ],
        "straggler": None
        if found is None
        else {
            "rank": found.rank,
            "last": found.last,
            "wait_ms": round(found.wait_s * 1000, 3),
            "wait_share": round(found.wait_share, 3),
            "phase": found.phase,
            "place": found.place,
        },
        "summary": summary(arrivals),
    }


def for_attempt(attempt_dir: Path) -> Arrivals | None:
    """The attempt's arrival analysis from the ranks' flight records."""
    return analyse(read_records(flight_file.directory(attempt_dir)))
