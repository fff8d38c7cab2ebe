"""The fault zoo as a benchmark: every case under safelaunch and under torchrun, scored.

    .venv/bin/python bench/faults/run.py [--only NAME,...] [--ci] [--no-torchrun]
                                         [--isolate auto|never] [--json results.json]

Prints a line per case (which fields each launcher got right) and the score per field
and in total. Total = class + rank + location + exit for both, "exit" counting only cases
where the expected code is the root cause's own; safelaunch's exit conventions (124 for
a hang, 128+N for a signal: "convention") and the rerun decision ("isolate") are its
alone and are scored on their own, outside the total. Both launchers get the same time.
Minutes, not part of the test suite (tests/test_fault_zoo.py runs the --ci subset).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from cases import CASES, Case
from zoo import FIELDS, Seen, available, run_safelaunch, run_torchrun, score

COMMON = ("class", "rank", "location", "exit")


def _marks(scores: dict[str, bool | None]) -> str:
    return " ".join(
        f"{name}:{'-' if ok is None else 'ok' if ok else 'NO'}" for name, ok in scores.items()
    )


def _describe(seen: Seen) -> str:
    ranks = ",".join(map(str, seen.ranks)) or "-"
    return f"class={seen.klass} rank={ranks} at={seen.location} exit={seen.exit_code}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--ci", action="store_true", help="only the fast CI subset")
    parser.add_argument("--no-torchrun", action="store_true")
    parser.add_argument("--isolate", default="auto", choices=("auto", "never", "always"))
    parser.add_argument("--json", type=Path, help="write every result here")
    args = parser.parse_args()
    wanted = {name for name in args.only.split(",") if name}
    cases: list[Case] = [
        c for c in CASES if (not wanted or c.name in wanted) and (c.ci or not args.ci)
    ]
    totals: dict[str, dict[str, list[bool]]] = {"safelaunch": {}, "torchrun": {}}
    results = []
    with tempfile.TemporaryDirectory(prefix="fault-zoo-") as scratch:
        for case in cases:
            if not available(case):
                print(f"{case.name}: skipped (needs {case.needs})")
                continue
            row = {"case": case.name, "expected": case.fault_line()}
            runs = [("safelaunch", run_safelaunch(case, Path(scratch) / case.name, args.isolate))]
            if not args.no_torchrun:
                runs.append(("torchrun", run_torchrun(case, Path(scratch) / f"{case.name}-tr")))
            print(f"{case.name} [{case.kind}]")
            for launcher, seen in runs:
                marks = score(case, seen)
                for name, ok in marks.items():
                    if ok is not None:
                        totals[launcher].setdefault(name, []).append(ok)
                print(f"  {launcher:10} {_marks(marks)}  ({_describe(seen)}, {seen.wall:.1f} s)")
                row[launcher] = {"scores": marks, "seen": _describe(seen), "wall": seen.wall}
            results.append(row)
            sys.stdout.flush()
    print(f"\n{len(results)} cases")
    for launcher, fields in totals.items():
        if not fields:
            continue
        per_field = [
            f"{name} {sum(fields[name])}/{len(fields[name])}" for name in FIELDS if name in fields
        ]
        right = sum(sum(fields[name]) for name in COMMON if name in fields)
        asked = sum(len(fields[name]) for name in COMMON if name in fields)
        print(f"{launcher:10} " + ", ".join(per_field) + f"; total {right}/{asked}")
    if args.json:
        args.json.write_text(json.dumps({"results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
