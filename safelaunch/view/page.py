"""report.html: the run on one self-contained page (inline CSS and SVG; no script, no network).

The summary of every attempt on top, then one lane per rank across attempts and reruns:
alive, rendezvous, progress, stalls, steps, collective progress, the hang point, the
exit or signal, the culprit marked; then every rank's log, linked.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from safelaunch.rundir.report_file import REPORT, TIMELINE
from safelaunch.view.lanes import Attempt, Segment, Timeline

LABEL = 110  # px left of the plot
PLOT = 860  # px of time
LANE = 40  # px per rank
BAR = 26  # px of it for the bars; the culprit's label goes below
TOP = 34  # px above the first lane (attempt names, axis)
MAX_TICKS = 120  # step marks per segment: more would only blur


def escape(text: str) -> str:
    """HTML-escape text and attribute values (html.escape would load html.entities, a
    2,000-entry table, on every launch's way out)."""
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:18px;margin:0 0 8px}
.attempt-summary{border-left:5px solid #999;padding:4px 10px;margin:6px 0;background:#f6f6f6}
.attempt-summary.status-succeeded,.attempt-summary.status-passed{border-color:#2a8f3a}
.attempt-summary.status-failed{border-color:#c62828}
.attempt-summary.status-hung{border-color:#e08a00}
.attempt-summary ul{margin:2px 0 0;padding-left:18px;color:#444;font-size:13px}
svg{font:12px system-ui,sans-serif}
.alive{fill:#e3e3e3}.rendezvous{fill:#9b7bd4}.progress{fill:#48a868}.stall{fill:#f0b43c}
.collectives{fill:none;stroke:#1f5fa8;stroke-width:1.5}.step{stroke:#0d3d1c;stroke-width:1}
.exit-succeeded{fill:#2a8f3a}.exit-failed{fill:#c62828}.exit-stopped,.exit-other{fill:#777}
.culprit .alive{stroke:#c62828;stroke-width:2}
.culprit-label{fill:#c62828;font-weight:bold;font-size:11px}
.hang-point{stroke:#c62828;stroke-width:2;stroke-dasharray:5 3}.hang-label{fill:#c62828}
.band{fill:none;stroke:#bbb;stroke-dasharray:2 2}.band-label{fill:#555}
.axis{fill:#777;font-size:11px}
table{border-collapse:collapse;margin-top:8px}td,th{border:1px solid #ddd;padding:2px 8px}
.ending{color:#555;font-size:12px}
.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}
"""


def _x(t: float, span: float) -> float:
    return round(LABEL + PLOT * max(0.0, t) / span, 1)


def _summary(attempt: Attempt) -> str:
    code = "" if attempt.exit_code is None else f", exit code {attempt.exit_code}"
    details = "".join(f"<li>{escape(d)}</li>" for d in attempt.details)
    return (
        f'<div class="attempt-summary status-{escape(attempt.status)}" '
        f'data-attempt="{escape(attempt.name)}"><b>{escape(attempt.name)}</b>: '
        f"{escape(attempt.headline)}{code}" + (f"<ul>{details}</ul>" if details else "") + "</div>"
    )


def _steps(segment: Segment, span: float, y: float) -> list[str]:
    steps = segment.steps
    every = max(1, len(steps) // MAX_TICKS)
    return [
        f'<line class="step" x1="{_x(t, span)}" x2="{_x(t, span)}" y1="{y + 3}" y2="{y + 8}">'
        f"<title>step {value}</title></line>"
        for t, value in steps[::every]
    ]


def _collectives(segment: Segment, span: float, y: float, most: int) -> str:
    if not segment.collectives:
        return ""
    height = BAR - 6
    points = " ".join(
        f"{_x(t, span)},{round(y + BAR - 3 - height * value / max(most, 1), 1)}"
        for t, value in segment.collectives
    )
    last = segment.collectives[-1][1]
    return (
        f'<polyline class="collectives" points="{points}">'
        f"<title>collective #{last}</title></polyline>"
    )


def _segment(segment: Segment, span: float, y: float, most: int) -> str:
    def box(kind: str, start: float, end: float, title: str, top: float = 2) -> str:
        x = _x(start, span)
        width = max(1.0, round(_x(end, span) - x, 1))
        return (
            f'<rect class="{kind}" x="{x}" y="{y + top}" width="{width}" '
            f'height="{BAR - 2 * top}"><title>{escape(title)}</title></rect>'
        )

    parts = [box("alive", segment.start, segment.end, f"rank {segment.rank} in {segment.attempt}")]
    if len(segment.rendezvous) == 2:
        parts.append(box("rendezvous", *segment.rendezvous, "rendezvous (init_process_group)", 6))
    parts.extend(box("progress", a, b, "making progress", 9) for a, b in segment.spans)
    parts.extend(
        box("stall", a, b, f"no progress for {b - a:.0f} s" + _at(segment), 9)
        for a, b in segment.stalls
    )
    parts.extend(_steps(segment, span, y))
    parts.append(_collectives(segment, span, y, most))
    kind = segment.state if segment.state in ("succeeded", "failed", "stopped") else "other"
    parts.append(
        f'<circle class="exit exit-{kind}" cx="{_x(segment.end, span)}" cy="{y + BAR / 2}" '
        f'r="5"><title>rank {segment.rank}: {escape(segment.ending)}</title></circle>'
    )
    culprit = " culprit" if segment.culprit else ""
    if segment.culprit:
        parts.append(
            f'<text class="culprit-label" x="{_x(segment.start, span) + 2}" y="{y + BAR + 10}">'
            f"culprit{escape(_short_at(segment))}</text>"
        )
    return (
        f'<g class="segment state-{escape(segment.state)}{culprit}" '
        f'data-attempt="{escape(segment.attempt)}" data-rank="{segment.rank}">'
        + "".join(parts)
        + "</g>"
    )


def _at(segment: Segment) -> str:
    return f": {segment.where}" if segment.where else ""


def _short_at(segment: Segment) -> str:
    """`: load_next_batch (train.py:28)`: the label must fit under its segment."""
    if not segment.where:
        return ""
    activity, _, place = segment.where.partition(" (")
    place = place.rstrip(")").split(" in ")[0].rsplit("/", 1)[-1]
    return f": {activity} ({place})" if place else f": {activity}"


def _axis(span: float, height: float) -> list[str]:
    raw = span / 8
    step = next((s for s in (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600) if s >= raw), raw)
    ticks = []
    t = 0.0
    while t <= span:
        ticks.append(f'<text class="axis" x="{_x(t, span)}" y="{height - 4}">{t:g} s</text>')
        t += step
    return ticks


def _svg(timeline: Timeline) -> str:
    ranks = timeline.ranks
    span = max(timeline.end, 1e-3)
    height = TOP + LANE * len(ranks) + 20
    most = max(
        (v for a in timeline.attempts for s in a.segments for _, v in s.collectives), default=1
    )
    parts = []
    for attempt in timeline.attempts:
        x, end = _x(attempt.start, span), _x(attempt.end, span)
        parts.append(
            f'<rect class="band" x="{x}" y="14" width="{max(1.0, end - x)}" '
            f'height="{height - 34}"/><text class="band-label" x="{x + 2}" y="12">'
            f"{escape(attempt.name)}: {escape(attempt.status)}</text>"
        )
    for index, rank in enumerate(ranks):
        y = TOP + LANE * index
        logs = [s for a in timeline.attempts for s in a.segments if s.rank == rank]
        parts.append(
            f'<g class="lane" data-rank="{rank}"><a href="{escape(logs[-1].log)}">'
            f'<text class="lane-label" x="4" y="{y + BAR / 2 + 4}">rank {rank}</text></a>'
            + "".join(_segment(s, span, y, most) for s in logs)
            + "</g>"
        )
    for attempt in timeline.attempts:
        if attempt.hang_at is not None:
            x = _x(attempt.hang_at, span)
            parts.append(
                f'<line class="hang-point" data-attempt="{escape(attempt.name)}" x1="{x}" '
                f'x2="{x}" y1="{TOP - 4}" y2="{height - 18}"/>'
                f'<text class="hang-label" x="{x - 4}" y="{TOP - 6}" text-anchor="end">'
                "hang declared</text>"
            )
    parts.extend(_axis(span, height))
    return (
        f'<svg id="lanes" xmlns="http://www.w3.org/2000/svg" width="{LABEL + PLOT + 30}" '
        f'height="{height}">' + "".join(parts) + "</svg>"
    )


def _logs(timeline: Timeline) -> str:
    names = [a.name for a in timeline.attempts]
    head = "".join(f"<th>{escape(n)}</th>" for n in names)
    rows = []
    for rank in timeline.ranks:
        cells = []
        for attempt in timeline.attempts:
            found = [s for s in attempt.segments if s.rank == rank]
            # the log's own name on the link; how the rank ended beside it
            link = (
                f'<a class="log" href="{escape(found[0].log)}">'
                f"{escape(PurePosixPath(found[0].log).name)}</a> "
                f'<span class="ending">{escape(found[0].ending)}</span>'
                if found
                else ""
            )
            cells.append(f"<td>{link}</td>")
        rows.append(f"<tr><th>rank {rank}</th>{''.join(cells)}</tr>")
    return f'<table id="logs"><tr><th>log</th>{head}</tr>{"".join(rows)}</table>'


_LEGEND = "".join(
    f'<span><i style="background:{colour}"></i>{escape(what)}</span>'
    for colour, what in (
        ("#e3e3e3", "alive"),
        ("#9b7bd4", "rendezvous"),
        ("#48a868", "progress"),
        ("#f0b43c", "stall"),
        ("#1f5fa8", "collectives issued"),
        ("#0d3d1c", "step"),
        ("#c62828", "failed / culprit / hang point"),
    )
)


def render(timeline: Timeline) -> str:
    """The page, as one string."""
    summaries = "".join(_summary(a) for a in timeline.attempts)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>safelaunch {escape(timeline.run_id)}</title><style>{_CSS}</style></head><body>"
        f'<header id="summary"><h1>safelaunch run {escape(timeline.run_id)}</h1>'
        f"{summaries}</header>"
        f'<section id="timeline">{_svg(timeline)}</section>'
        f'<p class="legend">{_LEGEND}</p>'
        f"<section>{_logs(timeline)}</section>"
        f'<p>Also: <a href="{TIMELINE}">{TIMELINE}</a> (open it in ui.perfetto.dev or '
        f"chrome://tracing); each attempt's {REPORT}.</p></body></html>\n"
    )
