"""Culprits named on generated faults: safelaunch against torchrun, over N cases.

    .venv/bin/python bench/culprits.py [--n 300] [--seed 24] [--jobs 1] [--kinds K,...]
        [--suite classic|wide] [--launchers safelaunch,torchrun] [--isolate auto|never]
        [--json out.json]
    .venv/bin/python bench/culprits.py --replay [SUITE:]KIND:SEED [--keep DIR]
    .venv/bin/python bench/culprits.py --rescore RESULTS.json --keep DIR

Each case is a training script written by bench/faultgen/fault_gen.py with one fault and
its ground truth (culprit ranks, file:line, class, the moment of the fault); --suite
picks the classic four loops or the wide suite's five others, `--kinds all` every kind
the suite has a template for. Both launchers run it with the same time budget (BUDGET)
and are scored on what they printed or wrote:

- safelaunch: report.json's `diagnosis.culprits` (rank, location, class of each) where the
  report has it; else today's fields, read as the fault zoo reads them (bench/faults/zoo.py:
  a hang's culprits and the place they are, else the root cause rank, its location and the
  diagnosis class). Where nothing was started, its one error line.
- torchrun: the rank of its "Root Cause" block and the innermost user frame of that rank's
  traceback (zoo.read_torchrun); it names no class.

Per case and field (rank, location, class):
- right: the rank field names at least one rank and every rank it names is a culprit of
  the truth; the location is the truth's file name:line; the class is the truth's word;
- confident wrong: the launcher named a rank that is not in the truth (also when it named
  a right one beside it); a wrong location or class is counted the same way;
- miss: it named no rank (no location, no class);
- precision = right / (right + confident wrong); recall = right / cases.
- "wrong+disagreed": confident wrong culprits where report.json's `diagnosis.disagreeing`
  lists any evidence (some evidence disagreed with the verdict and it was overruled);
  shown only once report.json has that key.
- fault->verdict: seconds from the fault's moment (the first time a rank or worker wrote to
  FAULTGEN_MOMENT) to the launcher's exit, median and worst over the cases where it named
  a right culprit.

Prints a table per kind and in total for each launcher, then every miss and confident
wrong answer by kind with its KIND:SEED, which `--replay KIND:SEED` runs again (keeping the
files with --keep). `--rescore` scores a run's saved report.json files (its --json and
--keep) again against the generator's truths as they are now, with this file's reading:
two runs scored alike though a truth was corrected in between. Minutes per 10 cases:
not part of the test suite (tests/test_culprit_faults.py runs a small sample under
safelaunch).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH / "faultgen"), str(BENCH / "faults")]

import fault_gen  # noqa: E402
import zoo  # noqa: E402
from fault_gen import ALL_KINDS, KINDS, Generated, Truth  # noqa: E402

LAUNCHERS = ("safelaunch", "torchrun")
HANG_TIMEOUT = 3.0  # safelaunch --hang-timeout: "a short hang timeout"
BUDGET = 90.0  # seconds either launcher gets per case before the harness stops it
FIELDS = ("rank", "location", "class")


@dataclass(frozen=True, slots=True, kw_only=True)
class Named:
    """What one launcher said about one case."""

    ranks: tuple[int, ...]
    location: str | None
    klass: str | None
    disagreeing: tuple[dict[str, Any], ...] | None  # None: report.json has no such key
    source: str  # culprits (the arbiter's), fields (today's), refused, torchrun
    exit_code: int
    wall: float
    fault_to_verdict: float | None
    fault_ran: bool  # the fault's line ran (it wrote its moment): else the case is void


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    truth: Truth
    launcher: str
    named: Named
    marks: dict[str, str] = field(default_factory=dict)  # field -> right | wrong | miss


def hang_timeout(truth: Truth) -> float:
    """safelaunch's --hang-timeout: longer than a group timeout the case sets itself, so
    the ranks that wait on a paused one time out first, as they would in a real job."""
    return (
        max(HANG_TIMEOUT, 2.0 * truth.group_timeout)
        if truth.group_timeout < fault_gen.GROUP_TIMEOUT
        else (HANG_TIMEOUT)
    )


def from_report(report: dict[str, Any]) -> tuple[tuple[int, ...], str | None, str | None, Any]:
    """(ranks, file:line, class, disagreeing) from report.json, the arbiter's keys first."""
    diagnosis = report["diagnosis"]
    disagreeing = diagnosis.get("disagreeing")
    culprits = diagnosis.get("culprits")
    if culprits is not None:
        ranks = tuple(c["rank"] for c in culprits if c.get("rank") is not None)
        first = culprits[0] if culprits else {}
        # a culprit with no class of its own has the diagnosis's: report.json leaves
        # "unknown" out of the culprit (it is no class), the diagnosis says it
        klass = first.get("class") or (diagnosis["class"] if culprits else None)
        return ranks, zoo.short(first.get("location")), klass, disagreeing
    ranks = zoo.reported_ranks(report)
    return ranks, zoo.reported_location(report), diagnosis["class"], disagreeing


def _moment(path: Path) -> float | None:
    try:
        stamps = [float(line) for line in path.read_text().split()]
    except (OSError, ValueError):
        return None
    return min(stamps) if stamps else None


def run_case(
    case: Generated,
    launcher: str,
    where: Path,
    isolate: str = "auto",
    env: dict[str, str] | None = None,
) -> Result:
    """One case under one launcher, in `where`, scored; `env` is added to the ranks'."""
    truth = case.truth
    script = case.write(where)
    moment_file = where / "moment"
    env = {**(env or {}), "FAULTGEN_MOMENT": str(moment_file)}
    started = time.time()
    if launcher == "safelaunch":
        seen = zoo.launch_safelaunch(
            [script.name], where, where, env, BUDGET, nproc=truth.world,
            hang_timeout=hang_timeout(truth), isolate=isolate,
        )  # fmt: skip
        reports = sorted(seen.run_dir.glob("attempt_*/report.json")) if seen.run_dir else []
        if reports:
            report = json.loads(reports[0].read_text())  # the job's own attempt, not a rerun
            ranks, location, klass, disagreeing = from_report(report)
            source = "culprits" if "culprits" in report["diagnosis"] else "fields"
        else:
            ranks, location, klass, disagreeing = seen.ranks, seen.location, None, None
            source = "refused"
    else:
        seen = zoo.launch_torchrun([script.name], where, where, env, BUDGET, nproc=truth.world)
        ranks, location, klass, disagreeing, source = (
            seen.ranks,
            seen.location,
            None,
            None,
            "torchrun",
        )
    moment = _moment(moment_file)
    ended = started + seen.wall
    named = Named(
        ranks=tuple(ranks), location=location, klass=klass,
        disagreeing=None if disagreeing is None else tuple(disagreeing), source=source,
        exit_code=seen.exit_code, wall=seen.wall,
        fault_to_verdict=None if moment is None else round(ended - moment, 2),
        fault_ran=moment is not None,
    )  # fmt: skip
    return Result(truth=truth, launcher=launcher, named=named, marks=score(truth, named))


def score(truth: Truth, named: Named) -> dict[str, str]:
    """right | wrong | miss for rank, location and class (the docstring's definitions)."""
    if not named.ranks:
        rank = "miss"
    else:
        rank = "right" if set(named.ranks) <= set(truth.culprits) else "wrong"
    marks = {"rank": rank}
    for name, said, expected in (
        ("location", named.location, truth.location),
        ("class", named.klass, truth.klass),
    ):
        marks[name] = "miss" if said is None else "right" if said == expected else "wrong"
    return marks


@dataclass(slots=True)
class Tally:
    """Counts of right / wrong / miss per field over some cases."""

    cases: int = 0
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    wrong_disagreed: int | None = None
    times: list[float] = field(default_factory=list)

    def add(self, result: Result) -> None:
        self.cases += 1
        for name, mark in result.marks.items():
            self.counts.setdefault(name, {"right": 0, "wrong": 0, "miss": 0})[mark] += 1
        if result.named.disagreeing is not None:
            self.wrong_disagreed = (self.wrong_disagreed or 0) + (
                result.marks["rank"] == "wrong" and bool(result.named.disagreeing)
            )
        if result.marks["rank"] == "right" and result.named.fault_to_verdict is not None:
            self.times.append(result.named.fault_to_verdict)

    def precision(self, name: str) -> float | None:
        count = self.counts.get(name, {})
        named = count.get("right", 0) + count.get("wrong", 0)
        return count["right"] / named if named else None

    def recall(self, name: str) -> float | None:
        return self.counts.get(name, {}).get("right", 0) / self.cases if self.cases else None


def tally(results: Iterable[Result]) -> dict[tuple[str, str], Tally]:
    """(launcher, kind) -> Tally, with kind "total" over every case."""
    tallies: dict[tuple[str, str], Tally] = {}
    for result in results:
        for kind in (result.truth.kind, "total"):
            tallies.setdefault((result.launcher, kind), Tally()).add(result)
    return tallies


def _ratio(value: float | None) -> str:
    return "   -" if value is None else f"{value:4.2f}"


def table(results: list[Result]) -> str:
    """The per-kind and total table, one row per launcher and kind."""
    tallies = tally(results)
    head = (
        f"{'kind':24} {'launcher':10} {'n':>4}  rank P/R   wrong miss  "
        f"line P/R   class P/R  wrong+dis  fault->verdict s (med/max)"
    )
    rows = [head, "-" * len(head)]
    kinds = [k for k in (*ALL_KINDS, "total") if any((name, k) in tallies for name in LAUNCHERS)]
    for kind in kinds:
        if kind == "total":
            rows.append("-" * len(head))
        for launcher in LAUNCHERS:
            t = tallies.get((launcher, kind))
            if t is None:
                continue
            rank = t.counts.get("rank", {})
            times = (
                f"{statistics.median(t.times):5.1f} / {max(t.times):5.1f}" if t.times else "    -"
            )
            dis = "-" if t.wrong_disagreed is None else str(t.wrong_disagreed)
            rows.append(
                f"{kind:24} {launcher:10} {t.cases:4}  {_ratio(t.precision('rank'))}/"
                f"{_ratio(t.recall('rank'))}  {rank.get('wrong', 0):5} {rank.get('miss', 0):4}  "
                f"{_ratio(t.precision('location'))}/{_ratio(t.recall('location'))}  "
                f"{_ratio(t.precision('class'))}/{_ratio(t.recall('class'))}  {dis:>9}  {times}"
            )
    return "\n".join(rows)


def failures(results: list[Result]) -> str:
    """Every miss and confident wrong culprit, by kind, with its KIND:SEED to replay."""
    lines = []
    for kind in ALL_KINDS:
        bad = [r for r in results if r.truth.kind == kind and r.marks["rank"] != "right"]
        if not bad:
            continue
        lines.append(f"{kind}: {len(bad)}")
        for r in sorted(bad, key=lambda r: (r.launcher, r.truth.seed)):
            said = ",".join(map(str, r.named.ranks)) or "none"
            dis = "" if not r.named.disagreeing else f" disagreeing={list(r.named.disagreeing)}"
            lines.append(
                f"  {r.truth.case_id:26} {r.launcher:10} {r.marks['rank']:5} named={said} "
                f"truth={','.join(map(str, r.truth.culprits))} at={r.named.location} "
                f"(truth {r.truth.location}, {r.truth.template}, exit {r.named.exit_code}, "
                f"{r.named.wall:.0f} s){dis}"
            )
    void = sorted({r.truth.case_id for r in results if not r.named.fault_ran})
    if void:  # a generator bug: the injected line never ran, the truth is void
        lines.append(f"fault never ran (void cases): {' '.join(void)}")
    return "\n".join(lines) or "no misses, no wrong culprits"


def _one(
    case_id: tuple[str, str, int], launchers: tuple[str, ...], scratch: Path, isolate: str
) -> list[Result]:
    suite, kind, seed = case_id
    case = fault_gen.generate(kind, seed, suite)
    results = []
    for launcher in launchers:
        where = scratch / f"{case.truth.case_id.replace(':', '-')}-{launcher}"
        results.append(run_case(case, launcher, where, isolate))
    return results


def _progress(r: Result, done: int, total: int, files: Path | None) -> None:
    marks = " ".join(f"{k}:{v}" for k, v in r.marks.items())
    print(
        f"[{done}/{total}] {r.truth.case_id:26} {r.launcher:10} {marks} "
        f"named={list(r.named.ranks)} at={r.named.location} class={r.named.klass} "
        f"({r.named.wall:.1f} s)",
        flush=True,
    )
    if files is not None:
        print(f"  truth: {r.truth}\n  files: {files}")


def rescore(rows: list[dict[str, Any]], kept: Path) -> list[Result]:
    """The results of a run's --json rows, their safelaunch reports read again from its
    --keep directory, each case's truth generated again (module docstring)."""
    results = []
    for row in rows:
        if row["launcher"] != "safelaunch":
            continue
        old = row["truth"]
        truth = fault_gen.generate(old["kind"], old["seed"], old.get("suite", "classic")).truth
        named = Named(**{**row["named"], "ranks": tuple(row["named"]["ranks"])})
        where = kept / f"{truth.case_id.replace(':', '-')}-safelaunch" / "logs" / "latest"
        reports = sorted(where.glob("attempt_*/report.json"))
        if reports:
            ranks, location, klass, disagreeing = from_report(json.loads(reports[0].read_text()))
            named = Named(**{
                **asdict(named), "ranks": tuple(ranks), "location": location, "klass": klass,
                "disagreeing": None if disagreeing is None else tuple(disagreeing),
            })  # fmt: skip
        results.append(
            Result(truth=truth, launcher="safelaunch", named=named, marks=score(truth, named))
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--jobs", type=int, default=1, help="cases at a time (2 cores: 1)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="K,... or all")
    parser.add_argument("--suite", default="classic", choices=tuple(fault_gen.SUITES))
    parser.add_argument("--launchers", default=",".join(LAUNCHERS))
    parser.add_argument("--isolate", default="auto", choices=("auto", "never", "always"))
    parser.add_argument("--replay", metavar="[SUITE:]KIND:SEED", help="run one case again")
    parser.add_argument("--keep", type=Path, help="keep every case's files and logs here")
    parser.add_argument("--json", type=Path, help="write every result here")
    parser.add_argument("--rescore", type=Path, metavar="RESULTS.json", help="score again")
    args = parser.parse_args()
    if args.rescore:
        again = rescore(json.loads(args.rescore.read_text()), args.keep or Path("."))
        print(table(again), "", failures(again), sep="\n")
        return 0
    # a job started with `&` by a shell ignores SIGINT: stopping it must still score the rest
    signal.signal(signal.SIGINT, signal.default_int_handler)
    launchers = tuple(name for name in args.launchers.split(",") if name)
    if args.replay:
        cases = [fault_gen.case_of(args.replay)]
    else:
        kinds = tuple(k for k in args.kinds.split(",") if k)
        if kinds == ("all",):
            kinds = tuple(k for k in ALL_KINDS if fault_gen.templates_for(k, args.suite))
        cases = [(args.suite, k, seed) for k, seed in fault_gen.sample(args.n, args.seed, kinds)]
    with tempfile.TemporaryDirectory(prefix="culprits-") as scratch:
        where = args.keep or Path(scratch)
        results: list[Result] = []
        pool = ThreadPoolExecutor(max_workers=max(1, args.jobs))
        runs = pool.map(lambda c: _one(c, launchers, where, args.isolate), cases)
        try:
            for done, case_results in enumerate(runs, 1):
                results.extend(case_results)
                for r in case_results:
                    _progress(r, done, len(cases), where if args.replay else None)
        except KeyboardInterrupt:  # SIGINT: the cases done so far are scored
            print(f"stopped: {len(results) // max(1, len(launchers))} cases done", flush=True)
        pool.shutdown(wait=True, cancel_futures=True)
    print()
    print(table(results))
    print()
    print(failures(results))
    if args.json:
        rows = [
            {"truth": asdict(r.truth), "launcher": r.launcher, "named": asdict(r.named),
             "marks": r.marks}
            for r in results
        ]  # fmt: skip
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
