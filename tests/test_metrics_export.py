"""--metrics-port: a live Gloo job scraped over HTTP; a bad or taken port stops the launch
before anything starts; the collector's step rate on a fake clock."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections import deque
from pathlib import Path

import pytest
from conftest import assert_no_orphans, launch, start, wait_for, worker

from safelaunch.metrics_export import RATE_WINDOW_S, RunCollector

parser = pytest.importorskip("prometheus_client.openmetrics.parser")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint in OpenMetrics (the format Prometheus asks for)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in parser.text_string_to_metric_families(text)
        for sample in family.samples
    }


def _key(name: str, rank: int, **more: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted({"node": "0", "rank": str(rank), **more}.items()))


def _rank(samples: dict, name: str, rank: int, **more: str) -> float:
    return samples[_key(name, rank, **more)]


def test_a_live_gloo_job_is_scraped_per_rank_and_per_job(tmp_path: Path) -> None:
    port = _free_port()
    job = worker("metrics_job.py")
    proc, mark = start(tmp_path, "--nproc-per-node=2", f"--metrics-port={port}", job)
    pids = tmp_path / "pids"
    try:
        wait_for(lambda: all((pids / f"ready-{r}").exists() for r in (0, 1)), 60, "both ranks")
        first = _scrape(port)

        def stepping() -> dict | None:
            samples = _scrape(port)
            rates = [samples.get(_key("safelaunch_rank_step_rate", r), 0.0) for r in (0, 1)]
            return samples if min(rates) > 0 else None

        later = wait_for(stepping, 30, "a step rate for both ranks", every=0.5)
    finally:
        (pids / "stop").touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert_no_orphans(mark, within=3.0)
    for rank in (0, 1):
        assert 0 <= _rank(later, "safelaunch_rank_heartbeat_age_seconds", rank) < 30
        assert _rank(later, "safelaunch_rank_steps", rank) > 0  # it rose: a rate
        collectives = _rank(later, "safelaunch_rank_collectives_total", rank)
        assert collectives > first.get(_key("safelaunch_rank_collectives_total", rank), 0) >= 0
        assert _rank(later, "safelaunch_rank_state", rank, safelaunch_rank_state="running") == 1
        assert _rank(later, "safelaunch_rank_state", rank, safelaunch_rank_state="exited") == 0
    node = (("node", "0"),)
    assert later[("safelaunch_job_attempt", node)] == 0
    assert later[("safelaunch_job_restarts", node)] == 0
    running = (("node", "0"), ("safelaunch_job_verdict", "running"))
    assert later[("safelaunch_job_verdict", running)] == 1
    with pytest.raises(OSError):  # the endpoint ends with the launch
        _scrape(port)


def test_a_taken_port_stops_the_launch_with_78_before_any_rank(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = launch(tmp_path, f"--metrics-port={port}", worker("exit_code.py"))
    assert run.returncode == 78
    [line] = run.stderr.splitlines()
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}" in line
    assert not list(tmp_path.glob("logs/*/attempt_0"))  # nothing started


@pytest.mark.parametrize("value", ["70000", "-1", "http"])
def test_a_port_that_is_no_port_is_a_usage_error(tmp_path: Path, value: str) -> None:
    run = launch(tmp_path, f"--metrics-port={value}", worker("exit_code.py"))
    assert run.returncode == 2
    [error] = [line for line in run.stderr.splitlines() if "error" in line]
    assert "--metrics-port" in error
    assert not (tmp_path / "logs").exists()


def _snapshot(attempt_dir: Path, written: float, step: int) -> None:
    import os

    live = attempt_dir / "live"
    live.mkdir(parents=True, exist_ok=True)
    ranks = [{"rank": 0, "state": "running", "beat_at": written, "step": step, "collectives": 4}]
    record = {"node": 0, "launcher_pid": os.getpid(), "written_at": written, "ranks": ranks}
    (live / "node0.json").write_text(json.dumps(record))


def test_the_step_rate_is_over_the_window_and_restarts_with_each_attempt(tmp_path: Path) -> None:
    now = [1000.0]
    collector = RunCollector(clock=lambda: now[0])
    collector.watched.run_dir = tmp_path

    def rate() -> float | None:
        for family in collector.collect():
            if family.name == "safelaunch_rank_step_rate":
                return family.samples[0].value if family.samples else None
        raise AssertionError("no step rate family")

    _snapshot(tmp_path / "attempt_0", 1000.0, 10)
    assert rate() is None  # one snapshot: no rate yet
    _snapshot(tmp_path / "attempt_0", 1010.0, 30)
    assert rate() == 2.0
    _snapshot(tmp_path / "attempt_0", 1010.0 + RATE_WINDOW_S, 30)  # stalled for a window
    assert rate() == 0.0
    _snapshot(tmp_path / "attempt_1", 2000.0, 0)  # a restart: counting starts again
    assert rate() is None
    assert isinstance(collector._steps[0], deque)


def test_the_dashboard_and_the_docs_name_only_metrics_the_endpoint_serves(tmp_path: Path) -> None:
    import re

    _snapshot(tmp_path / "attempt_0", 1000.0, 10)
    collector = RunCollector(clock=lambda: 1000.0)
    collector.watched.run_dir = tmp_path
    served = {sample.name for family in collector.collect() for sample in family.samples}
    served |= {family.name for family in collector.collect()}  # a rate's family has no sample yet
    root = Path(__file__).parents[1]
    dashboard = (root / "configs" / "grafana-safelaunch.json").read_text()
    json.loads(dashboard)
    named = set(re.findall(r"safelaunch_(?:rank|job)_[a-z_]+", dashboard))
    documented = set(
        re.findall(
            r"`(safelaunch_(?:rank|job)_[a-z_]+)`", (root / "docs" / "metrics.md").read_text()
        )
    )
    # a stateset's label is named after it: safelaunch_rank_state="running"
    assert named <= served and documented <= served
    assert {"safelaunch_rank_step_rate", "safelaunch_job_verdict"} <= named & documented
