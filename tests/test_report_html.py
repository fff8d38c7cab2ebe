"""report.html in a real browser (Debian's chromium, headless) and timeline.json's shape.

The pages of a failed run and of a hung run are rendered, screenshotted, and their DOM,
as the browser built it, is queried for the lanes, the culprit and the log links.
chromium comes from scripts/ci/browser.sh; where it is missing this test fails loudly.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import LiveJob, launch, worker

pytestmark = pytest.mark.timeout(400)  # the shared hung job: a minute on a loaded machine
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1100,620",
)


class _Elements(HTMLParser):
    """Every element of the DOM the browser dumped: (tag, attributes, text inside)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, {k: v or "" for k, v in attrs}))


def _select(dom: str, tag: str, cls: str | None = None, **data: str) -> list[dict[str, str]]:
    parser = _Elements()
    parser.feed(dom)
    return [
        attrs
        for name, attrs in parser.found
        if name == tag
        and (cls is None or cls in attrs.get("class", "").split())
        and all(attrs.get(f"data-{k}") == v for k, v in data.items())
    ]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "chromium is not installed: the browser test cannot run "
            "(scripts/ci/browser.sh installs Debian's package)"
        )
    return found


def _browse(page: Path, shot: Path, profile: Path) -> str:
    """The DOM as chromium built it, and a screenshot of the page."""
    # One browser for both (~1.2 CPU-s each start): the screenshot is written to its file,
    # the DOM to stdout.
    result = subprocess.run(
        [
            _chromium(),
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={shot}",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _check_page(run_dir: Path, tmp_path: Path, name: str) -> str:
    page = run_dir / "report.html"
    assert page.stat().st_size < 64 << 10  # small
    text = page.read_text()
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in text and "<script" not in text  # self-contained, no network
    shot = tmp_path / f"{name}.png"
    dom = _browse(page, shot, tmp_path / f"profile-{name}")
    assert _png_size(shot) == (1100, 620) and shot.stat().st_size > 10_000
    return dom


def _check_trace(run_dir: Path, ranks: int) -> list[dict]:
    trace = json.loads((run_dir / "timeline.json").read_text())
    events = trace["traceEvents"]
    names = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert sorted(e["tid"] for e in names) == list(range(ranks))
    for event in events:
        assert event["ph"] in ("M", "X", "i", "C") and isinstance(event.get("ts", 0), int)
        if event["ph"] == "X":
            assert event["dur"] > 0 and event["ts"] >= 0
    return events


def test_hung_run_page_draws_lanes_the_culprit_and_the_hang_point(
    hung_job: LiveJob, tmp_path: Path
) -> None:
    run_dir = hung_job.run_dir
    dom = _check_page(run_dir, tmp_path, "report-hung")
    assert [g["data-rank"] for g in _select(dom, "g", "lane")] == ["0", "1"]
    culprit = _select(dom, "g", "culprit")
    assert [(g["data-rank"], g["data-attempt"]) for g in culprit] == [("1", "attempt_0")]
    assert _select(dom, "line", "hang-point", attempt="attempt_0")
    for rank in ("0", "1"):
        segment = _select(dom, "g", "segment", rank=rank)
        assert segment and "state-stopped" in segment[0]["class"]
    assert len(_select(dom, "rect", "progress")) >= 2 and _select(dom, "rect", "stall")
    assert len(_select(dom, "polyline", "collectives")) == 2
    summary = _select(dom, "div", "attempt-summary", attempt="attempt_0")
    assert summary and "status-hung" in summary[0]["class"]
    assert "likely culprit rank 1" in dom and "culprit: load_next_batch (status_job.py:" in dom
    links = {a["href"] for a in _select(dom, "a", "log")}
    assert links == {"attempt_0/rank0.log", "attempt_0/rank1.log"}
    assert all((run_dir / link).exists() for link in links)
    events = _check_trace(run_dir, 2)
    assert any(
        e["name"].startswith("hang declared") and e["args"]["culprits"] == [1] for e in events
    )
    assert any(e["name"] == "stall" and e["tid"] == 1 for e in events)


def test_failed_run_page_marks_the_root_cause(tmp_path: Path) -> None:
    # Rank 1 raises, rank 0 is stopped: the marks of a failure need no torch in the ranks (a
    # Gloo job's lanes, progress and collectives: the hung page, above).
    run = launch(tmp_path, "--nproc-per-node=2", worker("fail_one.py"), timeout=120)
    assert run.returncode == 1, run.stderr
    dom = _check_page(run.run_dir, tmp_path, "report-failed")
    culprit = _select(dom, "g", "culprit")
    assert [(g["data-rank"], g["class"].split()[1]) for g in culprit] == [("1", "state-failed")]
    assert _select(dom, "circle", "exit-failed") and not _select(dom, "line", "hang-point")
    assert "failed: rank 1" in dom and "RuntimeError: rank 1 cannot read shard 7" in dom
    assert len(_select(dom, "g", "lane")) == 2
    events = _check_trace(run.run_dir, 2)
    assert any(e["name"] == "exit: exited with code 1" and e["tid"] == 1 for e in events)
