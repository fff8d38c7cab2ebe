"""`safelaunch status` output: a terminal table (colour on a terminal only) or JSON."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from safelaunch.status.model import JobState, JobStatus, RankRow, short_frame

STATUS_SCHEMA = "safelaunch.status/1"  # docs/status.md
_STATE_COLOURS = {
    "failed": "31",
    "killed": "31",
    "frozen": "31",
    "starting": "33",
    "rendezvous": "33",
    "computing": "32",
    "in collective": "36",
    "succeeded": "32",
}
_HEAD = ("RANK", "NODE", "STATE", "STEP", "COLL", "IDLE", "CPU%", "RSS", "GPU", "WHERE")


def _size(value: int | None) -> str:
    if value is None:
        return "-"
    amount = float(value)
    for unit in ("B", "K", "M"):
        if amount < 1024:
            return f"{amount:.0f}{unit}" if unit == "B" else f"{amount:.1f}{unit}"
        amount /= 1024
    return f"{amount:.1f}G"


def _cells(row: RankRow) -> tuple[str, ...]:
    state: str = row.state
    if row.returncode not in (None, 0):
        state += f" ({row.returncode})"
    step = "-" if row.step is None else ("~" if row.step_inferred else "") + str(row.step)
    usage = row.usage
    return (
        str(row.rank),
        str(row.node),
        state,
        step,
        "-" if row.collectives is None else str(row.collectives),
        "-" if row.idle_s is None else f"{row.idle_s:.0f}s",
        "-" if usage.cpu_percent is None else f"{usage.cpu_percent:.0f}",
        _size(usage.rss_bytes),
        "-" if usage.gpu_mib is None else f"{usage.gpu_mib}M",
        short_frame(row.frame),
    )


def table(status: JobStatus, run_dir: Path, colour: bool = False) -> str:
    """The header, one line per rank, then what looks wrong."""
    nodes = len(status.nodes)
    lines = [
        f"{run_dir}  {status.name}: {status.state}, {status.elapsed_s:.0f} s, "
        f"attempt {status.attempt}, {len(status.ranks)} of {status.world_size} ranks "
        f"on {nodes} node{'s' if nodes != 1 else ''}"
        + (
            f", hang deadline {status.hang_deadline_why}"
            if status.hang_deadline_why
            else f", hang timeout {status.hang_timeout_s:g} s"
            if status.hang_timeout_s
            else ""
        )
    ]
    if status.state == JobState.LAUNCHER_GONE:
        lines.append(
            f"  the launcher wrote nothing for {status.snapshot_age_s:.0f} s: it is gone or "
            "frozen; what follows is its last word"
        )
    rows = [_HEAD, *(_cells(r) for r in status.ranks)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEAD) - 1)]
    for index, row in enumerate(rows):
        text = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        text += "  " + row[-1]
        if colour and index:
            code = _STATE_COLOURS.get(status.ranks[index - 1].state)
            if code:
                text = f"\x1b[{code}m{text}\x1b[0m"
        lines.append(text.rstrip())
    for suspicion in status.suspicions:
        lines.append(f"\x1b[33m! {suspicion}\x1b[0m" if colour else f"! {suspicion}")
    return "\n".join(lines)


def as_json(status: JobStatus, attempt_dir: Path) -> str:
    """The same content for scripts (schema safelaunch.status/1)."""
    record = {
        "schema": STATUS_SCHEMA,
        "attempt_dir": str(attempt_dir),
        "run_dir": str(attempt_dir.parent),
    }
    return json.dumps({**record, **asdict(status)})
