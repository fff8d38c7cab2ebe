"""Compare the ranks' flight records: per process group, the first collective where they diverge.

Run in a subprocess (`python -m safelaunch.flights.check DIR...`): it imports torch, which
the launcher never does. Prints one JSON object (docs/report-json.md, `collectives`).

Matching is torch's own analyser (torch.distributed.flight_recorder's build_db), fed
with the records as its loader would read them. Our own code only where it does not
serve: Gloo dumps an empty pg_config (the rank side fills it from torch's group table),
Gloo records no point-to-point calls (the rank side tracks the ones in flight: pairs
waiting on each other are found here), and a plain per-group comparison when torch's
analyser refuses the input (it raises on records it does not expect).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

from safelaunch.flights.records import Record, call_text, load


def groups_of(records: dict[int, Record]) -> dict[str, Record]:
    """group name -> {desc, ranks}, from every rank's pg_config.

    torch's own dump of a Gloo job has none: its default group is then taken to be
    every rank that left a record (other groups' members are unknown: not compared).
    """
    groups: dict[str, Record] = {}
    for record in records.values():
        for entry in record.get("entries", []):
            name, desc = [*entry.get("process_group", []), "", ""][:2]
            if desc == "default_pg":
                groups.setdefault(str(name), {"desc": desc, "ranks": sorted(records)})
    for record in records.values():
        for name, config in (record.get("pg_config") or {}).items():
            with contextlib.suppress(ValueError, SyntaxError):
                ranks = ast.literal_eval(str(config.get("ranks", "[]")))
                if ranks:
                    groups[str(name)] = {"desc": config.get("desc"), "ranks": ranks}
    return groups


# Gloo under TORCH_DISTRIBUTED_DEBUG=DETAIL (an isolation rerun; torch 2.13, measured):
# entries carry process_group ['', ''] for the wrapped backend (pg_id 0) and the wrapper's
# helper group (pg_id 1: its fingerprint all_gathers) alike, pg_config is {'': ranks '[]'},
# and torch's build_collectives raises KeyError: ('', 0) (its _pg_guids[('', rank)]).
# Entries of a group without known members are left out (counted: `unnamed`). They would
# show no divergence anyway: DETAIL refuses a differing call before the backend records it.
def _named(entry: Record, groups: dict[str, Record]) -> bool:
    """A collective of a process group whose members are known (not a p2p call)."""
    return not entry.get("is_p2p") and str(entry.get("process_group", ["?"])[0]) in groups


def comparable(records: dict[int, Record], groups: dict[str, Record]) -> tuple[list[int], int]:
    """The ranks whose record holds a collective of a known group; how many collectives do not."""
    ranks = [r for r in sorted(records) if any(_named(e, groups) for e in records[r]["entries"])]
    collectives = [e for r in records.values() for e in r["entries"] if not e.get("is_p2p")]
    return ranks, sum(not _named(e, groups) for e in collectives)


def _entries(record: Record, group: str) -> dict[int, Record]:
    return {
        int(e["collective_seq_id"]): e
        for e in record.get("entries", [])
        if str(e.get("process_group", ["?"])[0]) == group and not e.get("is_p2p")
    }


def divergence(group: str, config: Record, records: dict[int, Record]) -> Record | None:
    """The first collective of `group` the recorded members did not all call alike.

    The plain comparison, used when torch's analyser refused the input. With every
    recorded member agreeing, a member without a record (it died, or never answered)
    leaves the first collective still in flight on the others as the lead.
    """
    members = [r for r in config["ranks"] if r in records]
    if not members:
        return None
    seen = {r: _entries(records[r], group) for r in members}
    for seq in sorted({s for calls in seen.values() for s in calls}):
        calls = {r: seen[r].get(seq) for r in members}
        present = {r: e for r, e in calls.items() if e is not None}
        reference = next(iter(present.values()))
        differ = {
            r: call_text(e) for r, e in present.items() if call_text(e) != call_text(reference)
        }
        missing = sorted(r for r, e in calls.items() if e is None)
        if missing or differ:
            return _finding(group, config, records, seq, reference, missing, differ)
    return in_flight(group, config, records)


def in_flight(group: str, config: Record, records: dict[int, Record]) -> Record | None:
    """The first collective not completed on a recorded member, when some member left no record."""
    if all(r in records for r in config["ranks"]):
        return None
    for seq, entry in sorted(
        (seq, e)
        for r in config["ranks"]
        if r in records
        for seq, e in _entries(records[r], group).items()
        if not e.get("retired", True)
    ):
        return _finding(group, config, records, seq, entry, [], {})
    return None


def _finding(
    group: str,
    config: Record,
    records: dict[int, Record],
    seq: int,
    reference: Record,
    missing: list[int],
    differ: dict[int, str],
    detail: str | None = None,
) -> Record:
    calls = {
        r: call_text(e)
        for r in config["ranks"]
        if r in records
        for e in [_entries(records[r], group).get(seq)]
        if e is not None
    }
    return {
        "group": group,
        "desc": config.get("desc"),
        "ranks": list(config["ranks"]),
        "seq": seq,
        "call": call_text(reference),
        "missing": missing,  # members whose record lacks it: they never called it
        "no_record": sorted(r for r in config["ranks"] if r not in records),
        "differ": {str(r): c for r, c in sorted(differ.items())},  # member -> its own call
        "calls": {str(r): c for r, c in sorted(calls.items())},
        "detail": detail,
    }


ANALYSER = "torch.distributed.flight_recorder.components"


def load_analyser() -> tuple[Any, Any]:
    """torch's analyser (build_db, JobConfig), without importing torch when possible.

    Its modules are pure Python that import only each other (torch 2.13), while `import
    torch` takes seconds, more on a loaded machine, after every hang and failure. So they
    are loaded under stand-ins for their parent packages (this process is ours and does
    nothing else with torch). Should they need more of torch, the stand-ins go and torch
    is imported whole.
    """
    spec = None if "torch" in sys.modules else importlib.util.find_spec("torch")
    if spec is not None and spec.origin is not None:
        parent = Path(spec.origin).parent
        for name in ("torch", "torch.distributed", "torch.distributed.flight_recorder", ANALYSER):
            stand_in = types.ModuleType(name)
            stand_in.__path__ = [str(parent.joinpath(*name.split(".")[1:]))]
            sys.modules[name] = stand_in
        try:
            return _analyser()
        except Exception:
            for name in [n for n in sys.modules if n == "torch" or n.startswith("torch.")]:
                del sys.modules[name]
    return _analyser()


def _analyser() -> tuple[Any, Any]:
    builder = importlib.import_module(f"{ANALYSER}.builder")
    config_manager = importlib.import_module(f"{ANALYSER}.config_manager")
    return builder.build_db, config_manager.JobConfig


def torch_analysis(records: dict[int, Record], groups: dict[str, Record]) -> dict[str, Record]:
    """torch's analyser on the records: the first collective per group that fails its checks."""
    build_db, JobConfig = load_analyser()
    version = str(next(iter(records.values())).get("version", "2.10"))
    details = {
        f"rank{rank}": {
            "host_name": f"rank{rank}",
            "rank": rank,
            "entries": [e for e in record["entries"] if _named(e, groups)],
            "version": record.get("version", version),
            # only groups that appear in the entries: torch checks every listed group
            "pg_config": {
                name: {
                    "name": name,
                    "desc": groups[name]["desc"],
                    "ranks": str(groups[name]["ranks"]),
                }
                for name in {
                    str(e["process_group"][0]) for e in record["entries"] if _named(e, groups)
                }
            },
        }
        for rank, record in records.items()
    }
    # a high cap: past it torch stops analysing every group, not just the one
    args = JobConfig().parse_args(
        ["flight", "--allow-incomplete-ranks", "--mismatch_cap", "100000"]
    )
    with contextlib.redirect_stdout(sys.stderr):  # it prints its own report: not ours
        database = build_db(details, args, version)
    findings: dict[str, Record] = {}
    for collective in database.collectives:
        group = _group_name(collective, groups)
        if group is None or group in findings:
            continue
        missing = sorted(collective.missing_ranks or ())
        mismatched = collective.mismatch_collectives or {}
        if collective.pass_check and not missing:
            continue
        reference = _entries(records[min(records)], group).get(collective.collective_seq_id)
        own = divergence(group, groups[group], records)
        if own is not None and own["seq"] == collective.collective_seq_id:
            finding = own
        else:
            first = next(
                (
                    _entries(records[r], group).get(collective.collective_seq_id)
                    for r in records
                    if _entries(records[r], group).get(collective.collective_seq_id)
                ),
                reference,
            )
            finding = _finding(
                group,
                groups[group],
                records,
                collective.collective_seq_id,
                first or {},
                missing,
                {},
            )
        finding["missing"] = sorted(set(missing) - set(finding["no_record"]))
        finding["detail"] = (
            "; ".join(str(c.type_of_mismatch) for c in mismatched.values() if c.type_of_mismatch)
            or None
        )
        if finding["missing"] or finding["differ"] or finding["detail"]:
            finding["analyser"] = "torch"
            findings[group] = finding  # else only unrecorded ranks: not a divergence
    return findings


def _numeric(name: str) -> tuple[int, str]:
    return (int(name), name) if name.isdigit() else (1 << 30, name)


def _group_name(collective: Any, groups: dict[str, Record]) -> str | None:
    """torch names a group by its pg name (+ a hash of its ranks): back to the pg name."""
    name = str(collective.group_id)
    if name in groups:
        return name
    for candidate in sorted(groups, key=len, reverse=True):
        if name.startswith(candidate):
            return candidate
    return None


def p2p_waits(records: dict[int, Record]) -> list[Record]:
    """Point-to-point calls in flight: pairs waiting on each other, or on a silent peer."""
    pending = {
        rank: list(record.get("safelaunch", {}).get("p2p", [])) for rank, record in records.items()
    }
    found: list[Record] = []
    paired: set[tuple[int, int]] = set()
    for rank, calls in sorted(pending.items()):
        for call in calls:
            peer = call.get("peer")
            if peer is None or (min(rank, peer), max(rank, peer)) in paired:
                continue
            theirs = [c for c in pending.get(peer, []) if c.get("peer") == rank]
            answered = any(c["op"] != call["op"] for c in theirs)
            if answered:
                continue  # a send facing a recv: in progress, not a deadlock
            same = [c for c in theirs if c["op"] == call["op"]]
            paired.add((min(rank, peer), max(rank, peer)))
            found.append(
                {
                    "ranks": [rank, peer],
                    "kind": f"{call['op']}/{call['op']}" if same else "unanswered",
                    "calls": {
                        str(rank): _p2p_text(call),
                        **({str(peer): _p2p_text(same[0])} if same else {}),
                    },
                    "no_record": peer not in records,
                }
            )
    return found


def _p2p_text(call: Record) -> str:
    shape = ", ".join(map(str, call.get("shape", [])))
    direction = "to" if call["op"] == "send" else "from"
    return f"{call['op']}({call.get('dtype', '?')}[{shape}]) {direction} rank {call['peer']}"


def analyse(paths: list[Path]) -> Record:
    """Everything the launcher needs, as JSON-ready data."""
    records = load(paths)
    groups = groups_of(records)
    compared, unnamed = comparable(records, groups)
    result: Record = {"ranks": sorted(records), "groups": groups, "divergences": [], "p2p": []}
    # ranks with collectives of a known group; collectives left out (see _named)
    result.update(compared=compared, unnamed=unnamed)
    if not records:
        return result
    by_torch: dict[str, Record] = {}
    try:
        if compared:  # nothing to analyse otherwise (torch's analyser raises on it)
            by_torch = torch_analysis(records, groups)
    except (Exception, SystemExit) as exc:  # torch's analyser refused it: plain comparison
        result["analyser_error"] = f"{type(exc).__name__}: {exc}"[:300]
    for name, config in sorted(groups.items(), key=lambda item: _numeric(item[0])):
        finding = by_torch.get(name) or (
            divergence(name, config, records)
            if name not in by_torch and "analyser_error" in result
            else in_flight(name, config, records)
        )
        if finding is not None:
            finding["kind"] = (
                "missing"
                if finding["missing"]
                else "mismatch"
                if finding["differ"] or finding.get("detail")
                else "unrecorded"
            )
            result["divergences"].append(finding)
    result["p2p"] = p2p_waits(records)
    return result


def main() -> None:
    print(json.dumps(analyse([Path(arg) for arg in sys.argv[1:]])))


if __name__ == "__main__":
    main()
