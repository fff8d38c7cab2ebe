"""Stragglers: the rank last at the collectives, from the flight records' arrival times.

End to end on real Gloo ranks (balanced, 30% slower data loading, slower compute), and
the rule itself on made-up records (noise in a balanced job is never a straggler).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import LONG, launch, line_of, worker

from safelaunch.diagnose import stragglers

SCHEMA = json.loads((Path(__file__).parents[1] / "docs" / "report.schema.json").read_text())
SCRIPT = worker("straggler.py")


def _run(tmp_path: Path, case: str) -> tuple[str, dict]:
    # The phases are sampled every ~50 ms whatever the heartbeat interval (rank/beat.py), so
    # the timeout can be one no loaded machine reaches: at 2 s, two healthy ranks starved
    # of CPU at load ~10 were declared hung.
    run = launch(tmp_path, "--nproc-per-node=2", "--hang-timeout=60", SCRIPT, env={"CASE": case})
    assert run.returncode == 0, run.stderr
    report = json.loads((run.attempt() / "report.json").read_text())
    pytest.importorskip("jsonschema").validate(report, SCHEMA)
    return run.stderr, report["stragglers"]


@pytest.mark.slow
def test_balanced_job_has_no_straggler(tmp_path: Path) -> None:
    text, found = _run(tmp_path, "balanced")
    assert found["compared"] == 32 and found["straggler"] is None and found["summary"] is None
    assert "straggler" not in text


@pytest.mark.slow
@LONG
def test_rank_slower_in_data_loading_is_named(tmp_path: Path) -> None:
    text, found = _run(tmp_path, "data")
    straggler = found["straggler"]
    assert straggler["rank"] == 1 and straggler["last"] >= 24, found
    assert straggler["phase"] == "data", found
    assert straggler["place"] == f"{SCRIPT}:{line_of(SCRIPT, 'time.sleep(LOAD')} in load_batch"
    assert "straggler: rank 1 arrived last at" in text and "more time in data loading" in text


@pytest.mark.slow
def test_rank_slower_in_compute_is_named(tmp_path: Path) -> None:
    text, found = _run(tmp_path, "compute")
    straggler = found["straggler"]
    assert straggler["rank"] == 1 and straggler["phase"] == "compute", found
    assert straggler["place"] == f"{SCRIPT}:{line_of(SCRIPT, 'time.sleep(FORWARD')} in forward"
    assert "more time in compute" in text


def _records(arrivals: list[list[float]], phases: dict[int, dict[str, int]] | None = None):
    """Two ranks' records: arrivals[i] = [rank 0's time, rank 1's time] of collective i."""
    records = {}
    for rank in (0, 1):
        entries = [
            {
                "process_group": ["0", "default_pg"],
                "collective_seq_id": i + 1,
                "profiling_name": "gloo:all_reduce",
                "time_created_ns": int(times[rank] * 1e9),
                "is_p2p": False,
            }
            for i, times in enumerate(arrivals)
        ]
        counts = (phases or {}).get(rank, {})
        records[rank] = {
            "entries": entries,
            "safelaunch": {
                "rank": rank,
                "pg_config": {"0": {"desc": "default_pg", "ranks": "[0, 1]"}},
                "phases": {"counts": counts, "places": {}},
            },
        }
    return records


def test_rule_on_made_up_arrivals() -> None:
    steps = [i * 0.1 for i in range(20)]
    # rank 1 always last, but by 1 ms in 100 ms steps: scheduling noise, not a straggler
    assert stragglers.analyse(_records([[t, t + 0.001] for t in steps])).straggler is None
    # alternating order with big lags: nobody is last at most collectives
    alternating = [[t, t + 0.03] if i % 2 else [t + 0.03, t] for i, t in enumerate(steps)]
    assert stragglers.analyse(_records(alternating)).straggler is None
    # too few collectives to say
    assert stragglers.analyse(_records([[t, t + 0.03] for t in steps[:5]])).straggler is None
    slow = stragglers.analyse(
        _records(
            [[t, t + 0.03] for t in steps],
            {0: {"data": 6, "compute": 4}, 1: {"data": 9, "compute": 1}},
        )
    )
    assert slow.straggler.rank == 1 and slow.straggler.last == 20 and slow.straggler.phase == "data"
    assert stragglers.summary(slow).startswith(
        "straggler: rank 1 arrived last at 20 of 20 collectives; the others waited 30 ms"
    )
