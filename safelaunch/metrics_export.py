"""--metrics-port N: the job's state as OpenMetrics, for Prometheus and Grafana.

Nothing new is measured: each scrape reads what the supervisor already writes, the live
snapshot of the newest attempt (`<attempt>/live/node<k>.json`, every 0.5-2 s: each rank's
state, last heartbeat, steps and collectives; supervisor/live.py) and its report.json
once it has one (the verdict). So the endpoint cannot slow or disturb the job: a scrape is
a few file reads on the server's own thread, and a broken file is a missing sample.

Served by prometheus-client (the optional extra `safelaunch[metrics]`), imported only by a
launch with the flag; bound to 127.0.0.1 unless --metrics-addr says otherwise, so another
user of a shared machine cannot read it. docs/metrics.md lists the metrics.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safelaunch.errors import PreflightError
from safelaunch.rundir import layout, live_file, report_file
from safelaunch.vocab import RankSnapshotState

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.metrics_core import Metric

RANK_STATES = tuple(str(state) for state in RankSnapshotState)
# the job's: before its first snapshot, while an attempt runs, then report.json's status
JOB_STATES = ("starting", "running", "succeeded", "failed", "hung", "interrupted")
RATE_WINDOW_S = 60.0  # the step rate is the steps made over the last minute of scrapes


@dataclass(slots=True)
class _Watched:
    """What the collector reads: set once the run has its directory."""

    run_dir: Path | None = None
    max_restarts: int = 0


class RunCollector:
    """A prometheus-client collector over the run directory's records."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.watched = _Watched()
        self._clock = clock
        self._steps: dict[int, deque[tuple[float, int]]] = {}  # rank: (written_at, step)
        self._attempt: int | None = None

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily, StateSetMetricFamily

        attempt, attempt_dir = self._newest()
        snapshot = _own_snapshot(attempt_dir) if attempt_dir is not None else None
        report = report_file.read_report(attempt_dir) if attempt_dir is not None else None
        if attempt != self._attempt:  # a restart: step counts start again
            self._steps.clear()
            self._attempt = attempt
        node = str(snapshot.get("node", 0)) if snapshot else "0"
        for name, text, value in (
            ("safelaunch_job_attempt", "The newest attempt (0: the first).", attempt or 0),
            ("safelaunch_job_restarts", "Restarts so far.", attempt or 0),
            ("safelaunch_job_max_restarts", "--max-restarts.", self.watched.max_restarts),
        ):
            family = GaugeMetricFamily(name, text, labels=["node"])
            family.add_metric([node], value)
            yield family
        verdict = StateSetMetricFamily(
            "safelaunch_job_verdict", "How the newest attempt stands.", labels=["node"]
        )
        now = _job_state(snapshot, report)
        verdict.add_metric([node], {state: state == now for state in JOB_STATES})
        yield verdict
        yield from self._rank_metrics(snapshot or {}, node)

    def _newest(self) -> tuple[int | None, Path | None]:
        run_dir = self.watched.run_dir
        if run_dir is None:
            return None, None
        try:
            numbers = [layout.attempt_number(p.name) for p in run_dir.iterdir()]
        except OSError:
            return None, None
        attempts = [n for n in numbers if n is not None]
        if not attempts:
            return None, None
        return max(attempts), layout.attempt_dir(run_dir, max(attempts))

    def _rank_metrics(self, snapshot: dict[str, Any], node: str) -> Iterator[Metric]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            StateSetMetricFamily,
        )

        labels = ["node", "rank"]
        age = GaugeMetricFamily(
            "safelaunch_rank_heartbeat_age_seconds",
            "Seconds since the rank's last heartbeat.",
            labels=labels,
        )
        steps = GaugeMetricFamily(
            "safelaunch_rank_steps", "Training steps the rank has made.", labels=labels
        )
        rate = GaugeMetricFamily(
            "safelaunch_rank_step_rate",
            f"Steps per second over the last {RATE_WINDOW_S:g} s of scrapes.",
            labels=labels,
        )
        collectives = CounterMetricFamily(
            "safelaunch_rank_collectives", "Collectives the rank has issued.", labels=labels
        )
        state = StateSetMetricFamily(
            "safelaunch_rank_state",
            "The rank's process, as seen.",
            labels=labels,
        )
        written = _number(snapshot.get("written_at"))
        for rank in snapshot.get("ranks", []):
            if not isinstance(rank, dict) or not isinstance(rank.get("rank"), int):
                continue
            key = [node, str(rank["rank"])]
            beat = _number(rank.get("beat_at"))
            if beat is not None:
                age.add_metric(key, max(0.0, self._clock() - beat))
            step = rank.get("step") if rank.get("step") is not None else rank.get("optimizer_steps")
            if isinstance(step, int) and written is not None:
                steps.add_metric(key, step)
                per_second = self._rate(rank["rank"], written, step)
                if per_second is not None:
                    rate.add_metric(key, per_second)
            if isinstance(rank.get("collectives"), int):
                collectives.add_metric(key, rank["collectives"])
            now = rank.get("state")
            state.add_metric(key, {s: s == now for s in RANK_STATES})
        yield from (age, steps, rate, collectives, state)

    def _rate(self, rank: int, written: float, step: int) -> float | None:
        """Steps per second over the window; None until two snapshots apart were seen."""
        samples = self._steps.setdefault(rank, deque())
        if samples and (step < samples[-1][1] or written < samples[-1][0]):
            samples.clear()  # a new attempt's count, or a file from before
        if not samples or written > samples[-1][0]:
            samples.append((written, step))
        while len(samples) > 2 and written - samples[1][0] >= RATE_WINDOW_S:
            samples.popleft()
        (first_at, first), (last_at, last) = samples[0], samples[-1]
        return (last - first) / (last_at - first_at) if last_at > first_at else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _own_snapshot(attempt_dir: Path) -> dict[str, Any] | None:
    """This launcher's snapshot: on several nodes the directory holds the others' too."""
    for path in live_file.snapshot_files(attempt_dir):
        try:
            snapshot = live_file.read_snapshot(path)
        except PermissionError:
            continue
        if snapshot is not None and snapshot.get("launcher_pid") == os.getpid():
            return snapshot
    return None


def _job_state(snapshot: dict[str, Any] | None, report: dict[str, Any] | None) -> str:
    if report is not None:
        job = report.get("job")
        status = job.get("status") if isinstance(job, dict) else report.get("status")
        if status == "rescaled":  # elastic: stopped to admit nodes; the next attempt follows
            return "running"
        return str(status) if status in JOB_STATES else "failed"
    return "running" if snapshot is not None else "starting"


class MetricsEndpoint:
    """The HTTP server on its own daemon thread, and what it reads."""

    def __init__(self, server: WSGIServer, collector: RunCollector) -> None:
        self._server = server
        self._collector = collector

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def watch(self, run_dir: Path, max_restarts: int) -> None:
        """From now on serve this run's records."""
        self._collector.watched = _Watched(run_dir=run_dir, max_restarts=max_restarts)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve(addr: str, port: int) -> MetricsEndpoint:
    """Bind addr:port and serve; PreflightError (nothing started) when it cannot."""
    try:
        from prometheus_client import start_http_server
        from prometheus_client.registry import CollectorRegistry
    except ImportError:
        raise PreflightError(
            "--metrics-port needs the prometheus-client library, which is not installed",
            "pip install 'safelaunch[metrics]' (or --metrics-port 0)",
        ) from None
    collector = RunCollector()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server, _thread = start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        raise PreflightError(
            f"--metrics-port {port}: cannot listen on {addr}:{port} ({exc.strerror or exc})",
            "choose a free port (or 0 to turn the endpoint off)",
        ) from None
    return MetricsEndpoint(server, collector)
