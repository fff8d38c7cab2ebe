"""bench/culprits.py's scoring: pure functions on report.json shapes and named ranks.

A right culprit names only ranks of the truth; a rank outside it is a confident wrong one
(even beside a right one); naming none is a miss. The arbiter's `diagnosis.culprits` is
read when the report has it, today's fields otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import culprits  # noqa: E402
import fault_gen  # noqa: E402

TRUTH = fault_gen.generate("exception", 7).truth  # culprit rank 1 of 2, helpers.py:16
TODAY: dict[str, Any] = {
    "hang": None,
    "diagnosis": {"class": "model/gradient", "root_cause_rank": 1,
                  "location": "/x/helpers.py:16 in rescale"},
}  # fmt: skip


def _named(ranks: tuple[int, ...], disagreeing: Any = None, **kw: Any) -> culprits.Named:
    base: dict[str, Any] = {
        "location": None, "klass": None, "source": "fields", "exit_code": 1, "wall": 1.0,
        "fault_to_verdict": 1.0, "fault_ran": True,
    }  # fmt: skip
    base.update(kw)
    return culprits.Named(ranks=ranks, disagreeing=disagreeing, **base)


def test_right_wrong_and_miss() -> None:
    assert TRUTH.culprits == (1,) and TRUTH.location == "helpers.py:16"
    assert culprits.score(TRUTH, _named((1,)))["rank"] == "right"
    assert culprits.score(TRUTH, _named((0,)))["rank"] == "wrong"
    assert culprits.score(TRUTH, _named((0, 1)))["rank"] == "wrong"  # a rank not in the truth
    assert culprits.score(TRUTH, _named(()))["rank"] == "miss"
    marks = culprits.score(TRUTH, _named((1,), location="helpers.py:16", klass="data/sampling"))
    assert marks == {"rank": "right", "location": "right", "class": "wrong"}


def test_todays_fields_then_the_arbiters() -> None:
    assert culprits.from_report(TODAY) == ((1,), "helpers.py:16", "model/gradient", None)
    groups = [{"ranks": [0], "location": "/t/train.py:5"}]
    diagnosis = {"class": "unknown", "root_cause_rank": None, "location": None}
    hang = {"hang": {"culprits": [0], "groups": groups}, "diagnosis": diagnosis}
    assert culprits.from_report(hang)[:2] == ((0,), "train.py:5")
    arbiter = {**TODAY, "diagnosis": {
        **TODAY["diagnosis"],
        "culprits": [{"rank": 3, "location": "/t/train.py:41 in step", "class": "communication",
                      "decided_by": {"source": "flight-record", "says": "..."}}],
        "disagreeing": [{"source": "first-failure", "ranks": [1], "says": "..."}],
    }}  # fmt: skip
    ranks, location, klass, disagreeing = culprits.from_report(arbiter)
    assert (ranks, location, klass) == ((3,), "train.py:41", "communication")
    assert disagreeing == [{"source": "first-failure", "ranks": [1], "says": "..."}]
    empty = {**TODAY, "diagnosis": {**TODAY["diagnosis"], "culprits": []}}
    assert culprits.from_report(empty)[:3] == ((), None, None)  # no guess: a miss


def test_precision_recall_and_wrong_where_evidence_disagreed() -> None:
    def result(ranks: tuple[int, ...], disagreeing: Any) -> culprits.Result:
        named = _named(ranks, disagreeing)
        return culprits.Result(
            truth=TRUTH, launcher="safelaunch", named=named, marks=culprits.score(TRUTH, named)
        )

    dis = ({"source": "first-failure", "ranks": [1], "says": "..."},)
    rows = [result((1,), ()), result((0,), dis), result((0,), ()), result((), ())]
    total = culprits.tally(rows)[("safelaunch", "total")]
    assert total.precision("rank") == 1 / 3 and total.recall("rank") == 1 / 4
    assert total.wrong_disagreed == 1
    unknown = culprits.tally([rows[0], result((0,), None)])[("safelaunch", "total")]
    assert unknown.wrong_disagreed == 0  # counted only where the report has the key
    text = culprits.failures(rows)
    assert text.count(TRUTH.case_id) == 3 and "disagreeing=" in text
