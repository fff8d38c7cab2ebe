"""The job's verdict as node 0 publishes it and every other node reads it (JSON).

Node 0 judges the job once from every node's summary (nodes.conclude_job) and publishes
the verdict; the others print and report that same record instead of each reading N
summaries (N^2 in all). Node 0 reports the record read back too, so report.json's `job`
is the same on every node. Bounded: the deciding item, ITEMS agreeing and ITEMS
disagreeing ones, and the node and host of the culprits only (all report.json needs).
"""

from __future__ import annotations

import json
from typing import Any

from safelaunch.diagnose.arbiter import Item, Source, Tier, Verdict
from safelaunch.diagnose.nodes import JobVerdict
from safelaunch.outcome import attempt_status
from safelaunch.vocab import FailureClass, Word, word_of

SCHEMA = "safelaunch.job-verdict/1"
ITEMS = 16


def _item(item: Item) -> dict[str, Any]:
    return {
        "source": item.source,
        "tier": item.tier,
        "ranks": list(item.ranks),
        "says": item.says,
        "location": item.location,
        "class": item.klass,
    }


def to_json(job: JobVerdict) -> str:
    verdict = job.verdict
    culprits = verdict.culprits if verdict is not None else ()
    return json.dumps(
        {
            "schema": SCHEMA,
            "status": job.status,
            "code": job.code,
            "lines": list(job.lines),
            "lost": list(job.lost),
            "root_node": job.root_node,
            "verdict": None
            if verdict is None
            else {
                "culprits": list(culprits),
                "decided_by": None if verdict.decided_by is None else _item(verdict.decided_by),
                "agreeing": [_item(i) for i in verdict.agreeing[:ITEMS]],
                "disagreeing": [_item(i) for i in verdict.disagreeing[:ITEMS]],
            },
            "placed": None
            if job.placed is None
            else [[r, *job.placed[r]] for r in culprits if r in job.placed],
        }
    )


def _word(value: object, words: type[Word]) -> Word:
    found = word_of(value, words)
    if found is None:
        raise ValueError(f"not a {words.__name__}: {value!r}")
    return found


def _read_item(data: dict[str, Any]) -> Item:
    klass = data["class"]
    return Item(
        source=_word(data["source"], Source),
        tier=_word(data["tier"], Tier),
        ranks=tuple(int(r) for r in data["ranks"]),
        says=str(data["says"]),
        location=None if data["location"] is None else str(data["location"]),
        klass=None if klass is None else _word(klass, FailureClass),
    )


def _read_verdict(data: dict[str, Any] | None) -> Verdict | None:
    if data is None:
        return None
    decided = data["decided_by"]
    return Verdict(
        culprits=tuple(int(r) for r in data["culprits"]),
        decided_by=None if decided is None else _read_item(decided),
        agreeing=tuple(_read_item(i) for i in data["agreeing"]),
        disagreeing=tuple(_read_item(i) for i in data["disagreeing"]),
    )


def from_json(text: str) -> JobVerdict | None:
    """The verdict node 0 published; None when it is not one (another version's launcher:
    the caller then judges from every node's summary itself)."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            return None
        placed = data["placed"]
        return JobVerdict(
            status=attempt_status(str(data["status"])),
            code=int(data["code"]),
            lines=tuple(str(line) for line in data["lines"]),
            lost=tuple(int(n) for n in data["lost"]),
            root_node=None if data["root_node"] is None else int(data["root_node"]),
            verdict=_read_verdict(data["verdict"]),
            placed=None
            if placed is None
            else {int(r): (int(node), str(host)) for r, node, host in placed},
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
