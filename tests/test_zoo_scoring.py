"""The fault zoo's scoring rules (bench/faults/zoo.py): pure functions, no launches.

Both launchers are scored on what they printed, on the same footing: a safelaunch
refusal gets no class or rerun answer it did not print; the exit code counts as accuracy
only where it is the root cause's own, apart from safelaunch's conventions; both get the
same time budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ZOO = Path(__file__).parent.parent / "bench" / "faults"
sys.path.insert(0, str(ZOO))

import run as zoo_run  # noqa: E402
import zoo  # noqa: E402
from cases import ANY, CASES, SCENARIOS, Case  # noqa: E402

BY_NAME = {case.name: case for case in CASES}
SYNTAX = BY_NAME["env_syntax_error"]
SCRIPT = f"{SCENARIOS}/env_syntax_error.py"
REFUSAL = (
    f"safelaunch: error: {SCRIPT}:6: SyntaxError: expected ':': for step in range(3)  # FAULT;"
    " nothing was started; fix the line and launch again\n"
)
# torchrun 2.13 on the same script (trimmed): every rank prints the SyntaxError
TORCHRUN_SYNTAX = f"""\
  File "{SCRIPT}", line 6
    for step in range(3)  # FAULT
                          ^^^^^^^
SyntaxError: expected ':'
  File "{SCRIPT}", line 6
    for step in range(3)  # FAULT
                          ^^^^^^^
SyntaxError: expected ':'
E1201 20:10:04.070000 5400 torch/distributed/elastic/multiprocessing/api.py:1002] failed
Traceback (most recent call last):
  File "/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1028, in main
    run(args)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_20:10:04
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 5427)
============================================================
"""


def _seen(**fields: object) -> zoo.Seen:
    base: dict[str, object] = {
        "klass": None, "ranks": (), "location": None, "exit_code": 0, "isolate": None,
        "conventions": True, "wall": 0.0, "output": "",
    }  # fmt: skip
    base.update(fields)
    return zoo.Seen(**base)  # type: ignore[arg-type]


def test_a_refusal_is_scored_on_what_it_printed_only() -> None:
    seen = zoo.refused(REFUSAL, 1, 0.1)
    assert (seen.klass, seen.ranks, seen.isolate) == (None, (), None)
    assert seen.location == "env_syntax_error.py:6"
    marks = zoo.score(SYNTAX, seen)
    # no class printed, no rank ran: wrong; no rerun answer: not scored
    assert marks == {
        "class": False, "rank": False, "location": True, "exit": True,
        "convention": None, "isolate": None,
    }  # fmt: skip


def test_torchrun_printing_the_same_syntax_error_is_scored_alike() -> None:
    seen = zoo.read_torchrun(TORCHRUN_SYNTAX, 1, 2.0)
    marks = zoo.score(SYNTAX, seen)
    refusal = zoo.score(SYNTAX, zoo.refused(REFUSAL, 1, 0.1))
    assert seen.location == "env_syntax_error.py:6"
    assert (marks["location"], marks["exit"]) == (refusal["location"], refusal["exit"])
    assert marks["rank"] is True  # its Root Cause block names a rank that died of it
    assert (marks["class"], marks["isolate"], marks["convention"]) == (False, None, None)


@pytest.mark.parametrize("case", [c for c in CASES if c.kind == "preflight"], ids=lambda c: c.name)
def test_a_syntax_error_expects_every_rank_as_culprit(case: Case) -> None:
    assert case.ranks == ANY  # under torchrun each rank starts and dies of it


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_case_is_located_exactly_when_its_script_marks_the_line(case: Case) -> None:
    path = SCENARIOS / "pkg" / "broken.py" if case.module else case.script
    assert case.located == ("# FAULT" in path.read_text())


def test_conventions_are_not_scored_as_the_root_causes_own_code() -> None:
    hang = BY_NAME["hang_lock_one_rank"]
    killed = BY_NAME["res_oom_killed"]
    plain = BY_NAME["model_shape_mismatch"]
    clean = BY_NAME["ok_uneven_finish"]
    assert not zoo.exit_is_own(hang) and not zoo.exit_is_own(killed)
    assert zoo.exit_is_own(plain) and zoo.exit_is_own(clean)
    safelaunch = zoo.score(hang, _seen(exit_code=124))
    assert (safelaunch["exit"], safelaunch["convention"]) == (None, True)
    torchrun = zoo.score(killed, _seen(exit_code=1, conventions=False))
    assert (torchrun["exit"], torchrun["convention"]) == (None, None)
    both = zoo.score(plain, _seen(exit_code=1, conventions=False))
    assert (both["exit"], both["convention"]) == (True, None)
    # the total counts class, rank, location and the own exit code only
    assert zoo_run.COMMON == ("class", "rank", "location", "exit")


@pytest.mark.parametrize("kind", ["hang", "failure"])
def test_both_launchers_get_the_same_time_budget(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = next(c for c in CASES if c.kind == kind)
    budgets: list[float] = []

    def record(
        cmd: list[str], cwd: Path, env: dict[str, str], timeout: float
    ) -> tuple[int, str, float]:
        budgets.append(timeout)
        return 1, "", 0.0

    monkeypatch.setattr(zoo, "_run", record)
    zoo.run_safelaunch(case, tmp_path / "s")
    zoo.run_torchrun(case, tmp_path / "t")
    assert budgets == [zoo.budget(case)] * 2
