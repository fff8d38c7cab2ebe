"""A long exploratory run of the hostile-input generator (tests/hostile.py), random seeds:
the launch's flags, variables and files, doctor, and explain (its run directories'
report.json drawn by hostile.report_bytes, as tests/test_generated_input.py does).

    .venv/bin/python bench/fuzz_inputs.py [--cases 3000]

CI runs 1,000 fixed cases (tests/test_hostile_input.py); this draws new ones and prints
every distinct defect (exception type and place, traceback, hang, exit 70, an error on
more than one line) with one example case, and how the cases ended.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import hostile
from hypothesis import HealthCheck, Phase, given, settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=3000)
    args = parser.parse_args()
    defects: collections.Counter[str] = collections.Counter()
    endings: collections.Counter[str] = collections.Counter()
    examples: dict[str, hostile.Case] = {}
    verdict_of = hostile._verdict

    def counted(result: Any, where: Path) -> str | None:
        endings[f"exit {result.exit_code}"] += 1
        return verdict_of(result, where)

    hostile._verdict = counted
    scratch = tempfile.mkdtemp(prefix="safelaunch-fuzz-")
    started = time.monotonic()

    @settings(
        max_examples=args.cases,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(hostile.case_strategy())
    def explore(case: hostile.Case) -> None:
        before = endings.total()
        verdict = hostile.run_case(case, scratch)
        if endings.total() == before:
            endings["passed every check (would start)"] += 1
        if verdict is not None:
            defects[verdict] += 1
            examples.setdefault(verdict, case)

    explore()
    print(f"{endings.total()} cases in {time.monotonic() - started:.0f} s: {dict(endings)}")
    print(f"{len(defects)} distinct defect(s), {defects.total()} failing case(s)")
    for defect, count in defects.most_common():
        print(f"{count:5d} {defect}\n      e.g. {examples[defect]!r:.400}")


if __name__ == "__main__":
    main()
