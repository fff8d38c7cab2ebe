"""timeline.json: the same timeline as Chrome trace events (Perfetto, chrome://tracing).

One track (thread) per rank; per attempt a complete event for the rank's life, nested
progress and stall events, instants for the rendezvous, the hang point and the exit, and
step / collective counters. Times in microseconds since the run started.
"""

from __future__ import annotations

import json
from typing import Any

from safelaunch.view.lanes import Segment, Timeline

PID = 1  # the run


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _complete(name: str, rank: int, start: float, end: float, **args: Any) -> dict[str, Any]:
    return {
        "name": name,
        "ph": "X",
        "pid": PID,
        "tid": rank,
        "ts": _us(start),
        "dur": max(1, _us(end - start)),
        "args": args,
    }


def _instant(name: str, rank: int, at: float, **args: Any) -> dict[str, Any]:
    return {"name": name, "ph": "i", "s": "t", "pid": PID, "tid": rank, "ts": _us(at), "args": args}


def _segment(segment: Segment) -> list[dict[str, Any]]:
    rank = segment.rank
    events = [
        _complete(
            segment.attempt,
            rank,
            segment.start,
            segment.end,
            state=segment.state,
            ending=segment.ending,
            log=segment.log,
            culprit=segment.culprit,
        )
    ]
    # Progress and stalls never overlap, so they nest inside the attempt's event.
    events.extend(_complete("progress", rank, a, b) for a, b in segment.spans)
    events.extend(_complete("stall", rank, a, b, where=segment.where) for a, b in segment.stalls)
    if segment.rendezvous:
        events.append(_instant("rendezvous done", rank, segment.rendezvous[-1]))
    events.append(_instant(f"exit: {segment.ending}", rank, segment.end))
    for name, series in (("step", segment.steps), ("collectives", segment.collectives)):
        events.extend(
            {
                "name": f"rank {rank} {name}",
                "ph": "C",
                "pid": PID,
                "ts": _us(t),
                "args": {name: value},
            }
            for t, value in series
        )
    return events


def trace(timeline: Timeline) -> str:
    """The trace, as JSON text (the object form, with displayTimeUnit)."""
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": PID, "args": {"name": timeline.run_id}}
    ]
    for rank in timeline.ranks:
        events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": PID,
                "tid": rank,
                "args": {"name": f"rank {rank}"},
            }
        )
        events.append(
            {
                "name": "thread_sort_index",
                "ph": "M",
                "pid": PID,
                "tid": rank,
                "args": {"sort_index": rank},
            }
        )
    for attempt in timeline.attempts:
        for segment in attempt.segments:
            events.extend(_segment(segment))
        if attempt.hang_at is not None:
            events.append(
                {
                    "name": f"hang declared ({attempt.name})",
                    "ph": "i",
                    "s": "g",
                    "pid": PID,
                    "tid": attempt.culprits[0] if attempt.culprits else 0,
                    "ts": _us(attempt.hang_at),
                    "args": {"culprits": list(attempt.culprits), "summary": attempt.headline},
                }
            )
    return json.dumps(
        {
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": {"run_id": timeline.run_id, "started_at": timeline.started_at},
        }
    )
