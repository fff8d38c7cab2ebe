"""report.html and timeline.json from records alone: attempts, reruns, culprits, nesting."""

from __future__ import annotations

import json
from pathlib import Path

from test_report_html import _select

from safelaunch.rundir.writing import write_file
from safelaunch.view import write_views

T0 = 1_800_000_000.0


def _attempt(run: Path, name: str, start: float, status: str, **extra: object) -> None:
    """An attempt directory as the launcher leaves it: report.json and the live history."""
    ranks = [
        {"rank": r, "state": "stopped", "exit_code": None, "signal": "SIGTERM",
         "ended_after_s": 10.0, "log": str(run / name / f"rank{r}.log")}
        for r in (0, 1)
    ]  # fmt: skip
    report = {"run_id": "run", "status": status, "exit_code": 1, "duration_s": 10.5,
              "ranks": ranks, "hang": None, "diagnosis": {}}  # fmt: skip
    report.update(extra)
    lane = {
        "spawned_at": start, "ended_at": start + 10, "returncode": -15,
        "spans": [[start + 1, start + 3]], "steps": [[start + 2, 1], [start + 3, 2]],
        "collectives": [[start + 2, 4]], "rendezvous": [start + 0.5, start + 1],
    }  # fmt: skip
    history = {"started_at": start, "teardown_at": start + 9, "stall_after_s": 5.0,
               "ranks": {"0": lane, "1": lane}}  # fmt: skip
    (run / name / "live").mkdir(parents=True)
    (run / name / "report.json").write_text(json.dumps(report))
    (run / name / "live" / "history-node0.json").write_text(json.dumps(history))


def test_one_lane_per_rank_across_attempts_and_reruns(tmp_path: Path) -> None:
    failed = {"diagnosis": {"root_cause_rank": 0, "class": "data/sampling", "error": "E"}}
    hung = {"hang": {"stuck_for_s": 6, "culprits": [1], "reason": "behind", "groups": [
        {"ranks": [1], "activity": "load", "location": "/x/train.py:9 in load"}]}}  # fmt: skip
    _attempt(tmp_path, "attempt_0", T0, "failed", **failed)
    _attempt(tmp_path, "attempt_1", T0 + 20, "hung", **hung)
    _attempt(tmp_path, "isolate_gloo", T0 + 40, "passed", exit_code=0)
    assert write_views(tmp_path, write_file)
    page = (tmp_path / "report.html").read_text()
    assert [g["data-rank"] for g in _select(page, "g", "lane")] == ["0", "1"]
    segments = [(g["data-rank"], g["data-attempt"]) for g in _select(page, "g", "segment")]
    assert segments == [
        (r, a) for r in "01" for a in ("attempt_0", "attempt_1", "isolate_gloo")
    ]  # in time order, rank by rank
    culprits = [(g["data-rank"], g["data-attempt"]) for g in _select(page, "g", "culprit")]
    assert culprits == [("0", "attempt_0"), ("1", "attempt_1")]
    assert [h["data-attempt"] for h in _select(page, "line", "hang-point")] == ["attempt_1"]
    summaries = [d["data-attempt"] for d in _select(page, "div", "attempt-summary")]
    assert summaries == ["attempt_0", "attempt_1", "isolate_gloo"]  # attempts, then reruns
    # a log link says which file it opens; how the rank ended stands beside it
    assert (
        '<a class="log" href="attempt_1/rank0.log">rank0.log</a> '
        '<span class="ending">SIGTERM</span>'
    ) in page
    assert "culprit: load (train.py:9)" in page
    assert "rank 1: /x/train.py:9 in load" in page  # one rank: "rank", not "ranks [1]"
    stalls = _select(page, "rect", "stall")
    assert len(stalls) == 6  # 3 s to 10 s without progress, in each of 6 segments
    trace = json.loads((tmp_path / "timeline.json").read_text())
    _assert_nested(trace["traceEvents"])


def _assert_nested(events: list[dict]) -> None:
    """Complete events on one track nest or follow each other, as trace viewers need."""
    by_track: dict[int, list[tuple[int, int]]] = {}
    for event in events:
        if event["ph"] == "X":
            by_track.setdefault(event["tid"], []).append((event["ts"], event["ts"] + event["dur"]))
    for spans in by_track.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_: list[int] = []
        for start, end in spans:
            while open_ and open_[-1] <= start:
                open_.pop()
            assert not open_ or end <= open_[-1], (start, end, open_)
            open_.append(end)


def test_a_rerun_listed_after_every_attempt_whatever_its_clock(tmp_path: Path) -> None:
    """An isolation rerun whose history starts early (or has none) still follows the job."""
    _attempt(tmp_path, "attempt_0", T0 + 30, "failed")
    _attempt(tmp_path, "attempt_1", T0 + 40, "failed")
    _attempt(tmp_path, "isolate_gloo", T0, "passed", exit_code=0)
    assert write_views(tmp_path, write_file)
    page = (tmp_path / "report.html").read_text()
    summaries = [d["data-attempt"] for d in _select(page, "div", "attempt-summary")]
    assert summaries == ["attempt_0", "attempt_1", "isolate_gloo"]


def test_nothing_ran_no_page(tmp_path: Path) -> None:
    assert not write_views(tmp_path, write_file)
    assert not (tmp_path / "report.html").exists()
