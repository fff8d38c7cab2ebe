"""What the launcher and every rank import: the launch cost guarded without a clock.

Each rank pays its bootstrap's imports at start, and a launch pays the launcher's before
the first rank starts; the timings are bench/per_rank.py's (wall-clock bounds do not
belong in pass/fail tests). These guard the modules that were measured to cost and are
not needed there, in a fresh interpreter each.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

NEW_MODULES = (
    "import sys; before = set(sys.modules); {imports}; "
    "print(' '.join(sorted(set(sys.modules) - before)))"
)


def imported_by(imports: str) -> set[str]:
    """The modules a fresh interpreter loads for `imports` (beyond what site loaded)."""
    code = NEW_MODULES.format(imports=imports)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def imported_without_site(imports: str) -> set[str]:
    """The same in `python -S`, as a plain install starts: an editable install's site hook
    loads re, functools, contextlib and more into every interpreter, hiding their cost."""
    code = NEW_MODULES.format(imports=imports)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    argv = [sys.executable, "-S", "-c", code]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
    return set(out.stdout.split())


RANK_MODULES = ("beat", "bootstrap", "flight_recorder", "stdlib_standins", "names", "pathentry")
RANK_MODULES += ("phases", "dist_hooks", "call_ledger")
# the records every rank writes (safelaunch/rundir/); the others load where they are used
RUNDIR_MODULES = ("exit_file", "frozen", "heartbeat_file", "jsontext")


def test_the_rank_bootstrap_imports_nothing_of_the_launcher_nor_typing_json_re() -> None:
    loaded = imported_by("from safelaunch.rank.bootstrap import main")
    assert "safelaunch.rank.bootstrap" in loaded
    ours = {m for m in loaded if m.startswith("safelaunch")}
    assert ours <= {"safelaunch", "safelaunch.rank", "safelaunch.rundir"} | {
        f"safelaunch.rank.{m}" for m in RANK_MODULES
    } | {f"safelaunch.rundir.{m}" for m in RUNDIR_MODULES}
    # typing: ~2 ms of every rank's start, for annotations only (safelaunch/__init__.py);
    # json with re: ~3.5 ms in a plain install (rundir/jsontext.py writes the records). An
    # editable install's site hook already loads re, so that line proves more elsewhere.
    assert not {"typing", "json", "re"} & loaded


def test_the_rank_bootstrap_leaves_the_stdlib_s_heavier_helpers_to_the_script() -> None:
    """signal (enum, functools, collections), threading, contextlib, types and
    importlib.machinery were 5-7 ms of an empty rank's ~24 ms of CPU; rank/stdlib_standins.py takes
    what the rank needs of them from their C cores (_signal, _thread)."""
    loaded = imported_without_site("from safelaunch.rank.bootstrap import main")
    assert "safelaunch.rank.bootstrap" in loaded
    heavy = {"signal", "enum", "threading", "contextlib", "functools", "collections", "types"}
    assert not (heavy | {"importlib.machinery", "typing", "json", "re"}) & loaded


def test_the_cli_loads_no_launch_machinery_before_it_parses() -> None:
    loaded = imported_by("import safelaunch.cli")
    heavy = ("safelaunch.launch", "safelaunch.diagnose", "safelaunch.report", "safelaunch.view")
    assert not {m for m in loaded if m.startswith(heavy)}
    # click took ~15-18 ms of a launch before any rank could start; argparse ~2 ms.
    assert not {m for m in loaded if m == "click" or m.startswith("click.")}


def test_the_package_itself_stays_light() -> None:
    """`python -m safelaunch` imports the package before it can catch a Ctrl-C."""
    loaded = imported_by("import safelaunch")
    assert loaded <= {"safelaunch", "__future__"}


def test_the_launch_path_leaves_statistics_to_jobs_with_collectives() -> None:
    # statistics pulls fractions and decimal (~2.5 ms); diagnose/stragglers.py needs it only
    # when ranks met in collectives, and imports it there.
    loaded = imported_by(
        "import safelaunch.cli, safelaunch.launch, safelaunch.attempt; "
        "safelaunch.attempt.load_judging()"
    )
    assert "safelaunch.diagnose.stragglers" in loaded
    assert not {"statistics", "fractions", "decimal"} & loaded


def test_the_ranks_start_before_the_launcher_loads_what_judges_them() -> None:
    """What a launch imports before its first rank starts: no diagnosis, report or outcome
    (attempt.JUDGING, loaded while the ranks start, with the view written at the end), no
    lint rules or parser (a launch reads the lint cache)."""
    loaded = imported_by("import safelaunch.cli, safelaunch.launch")
    later = (
        "safelaunch.diagnose",
        "safelaunch.report",
        "safelaunch.outcome",
        "safelaunch.cause",
        "safelaunch.view",
        "safelaunch.isolation",
        "safelaunch.rendezvous.membership",
        "safelaunch.lint.rules",
        "safelaunch.lint.scan",
    )
    assert not {m for m in loaded if m.startswith(later)}
    # the attempt's supervisor: a multi-node launch loads it while torch's rendezvous waits
    assert not {"safelaunch.attempt", "safelaunch.supervisor.loop"} & loaded
    meanwhile = imported_by(
        "import safelaunch.cli, safelaunch.launch; safelaunch.launch._load_attempt()"
    )
    assert {"safelaunch.attempt", "safelaunch.supervisor.loop", "safelaunch.diagnose"} <= meanwhile
    judged = imported_by(
        "import safelaunch.cli, safelaunch.launch, safelaunch.attempt; "
        "safelaunch.attempt.load_judging()"
    )
    assert {
        "safelaunch.diagnose",
        "safelaunch.report",
        "safelaunch.outcome",
        "safelaunch.view",
    } <= judged


FAILURE_ONLY = (
    "safelaunch.cause",
    "safelaunch.flights.forensics",
    "safelaunch.diagnose.errortext",
    "safelaunch.hangs.analysis",
    "safelaunch.diagnose.leaving",
    "safelaunch.diagnose.rootcause",
)
# Loaded only by a launch with their flag: --metrics-port (prometheus-client, an optional
# extra: tens to hundreds of ms of imports) and --on-verdict.
OPT_IN = ("prometheus_client", "safelaunch.metrics_export", "safelaunch.on_verdict")
LAUNCH_AND_LIST = (
    "import atexit, sys\n"
    "listing = sys.argv[1]\n"
    "def listed():\n"
    "    with open(listing, 'w') as out:\n"
    "        out.write(' '.join(sorted(sys.modules)))\n"
    "atexit.register(listed)\n"
    "sys.argv = ['safelaunch', '--nproc-per-node=2', '--log-dir', sys.argv[2], sys.argv[3]]\n"
    "from safelaunch.entry import main\n"
    "main()\n"
)


def _launched(tmp_path: Path, script: str) -> tuple[int, set[str]]:
    """A real launch in one interpreter; the modules it had loaded when it exited."""
    (tmp_path / "job.py").write_text(script)
    listing = tmp_path / "modules.txt"
    argv = [sys.executable, "-c", LAUNCH_AND_LIST, str(listing), str(tmp_path / "logs"), "job.py"]
    run = subprocess.run(argv, cwd=tmp_path, capture_output=True, timeout=90)
    return run.returncode, set(listing.read_text().split())


def test_a_job_that_succeeds_never_loads_the_failure_analysis(tmp_path: Path) -> None:
    """The root-cause rule, error texts, hang and flight-record analysis, how ranks left and
    the root-cause block were ~13 ms of the launcher's CPU in every launch: now imported
    only where a failure or hang is judged (diagnose/__init__.py, report.py)."""
    code, loaded = _launched(tmp_path, "")
    assert code == 0
    assert "safelaunch.diagnose" in loaded and "safelaunch.report" in loaded
    assert not {m for m in loaded if m.startswith(FAILURE_ONLY)}
    assert not {m for m in loaded if m.startswith(OPT_IN)}
    code, loaded = _launched(
        tmp_path, "import os, sys\nif os.environ['RANK'] == '1':\n    sys.exit(3)\n"
    )
    assert code == 3
    assert set(FAILURE_ONLY) - {"safelaunch.hangs.analysis"} <= loaded
    assert not {m for m in loaded if m.startswith(OPT_IN)}  # not on a failure either


def test_status_loads_none_of_the_launch_s_modules() -> None:
    """`safelaunch status`, called again and again on a loaded node, was ~0.25 s of CPU, most
    of it importing the launch (config, plan, preflight, supervisor, diagnose) and psutil
    (bench/status_cost.py)."""
    loaded = imported_by(
        "sys.argv = ['safelaunch', 'status']; import safelaunch.entry, safelaunch.cli, "
        "safelaunch.status, safelaunch.status.measure"
    )
    assert "safelaunch.status.measure" in loaded
    launch = ("config", "plan", "preflight", "supervisor", "diagnose", "outcome", "hangs")
    launch += ("launch", "cli.options", "cli.sources", "values")
    assert not {m for m in loaded if m.startswith(tuple(f"safelaunch.{m}" for m in launch))}
    assert not {"psutil", "socket", "shutil"} & loaded
