"""Reading flight records: explain reads the job's last attempt's (not the
Gloo rerun's), "agree" only when two ranks' collectives were compared, and the dump
request neither kills a rank that is exiting on its own nor labels it stopped by safelaunch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import builders
import pytest
from conftest import launch, safelaunch_cmd

from safelaunch.flights import check as flightcheck
from safelaunch.flights import forensics as collectives
from safelaunch.flights import found
from safelaunch.flights.forensics import Forensics
from safelaunch.flights.request import catches, exiting
from safelaunch.outcome import STOP_SIGNALS, judge
from safelaunch.plan import DUMP_SIGNAL
from safelaunch.rank import names
from safelaunch.supervisor import RankExit

# --- which directory's records explain reads -------------------------------------------


def _records(directory: Path, ranks: int = 2, age: float = 0.0) -> None:
    (directory / "flight").mkdir(parents=True)
    for rank in range(ranks):
        path = directory / "flight" / f"rank{rank}.json"
        path.write_text("{}")
        os.utime(path, (time.time() - age, time.time() - age))


@pytest.mark.parametrize(
    ("layout", "chosen"),
    [
        # the isolation rerun's records are newer: the job's attempt still wins
        ({"attempt_0": 60, "isolate_gloo": 0}, "attempt_0"),
        # the last attempt, not the newest files (attempt_10 after attempt_9: by number)
        ({"attempt_9": 0, "attempt_10": 60, "isolate_gloo": 0}, "attempt_10"),
        # only a rerun left records (the attempt died before any dump): those
        ({"isolate_gloo": 0, "isolate_single": 30}, "isolate_gloo"),
        ({"isolate_gloo": 30}, "isolate_gloo"),
    ],
)
def test_explain_reads_the_last_attempts_records(
    tmp_path: Path, layout: dict[str, float], chosen: str
) -> None:
    for name, age in layout.items():
        _records(tmp_path / "run" / name, age=age)
    records = found.records_under(tmp_path / "run")
    assert {p.parent.parent.name for p in records} == {chosen}
    assert len(records) == 2


def test_torch_dumps_outside_attempts_the_newest_directory(tmp_path: Path) -> None:
    for name, age in (("old", 60), ("new", 0)):
        (tmp_path / name).mkdir()
        dump = tmp_path / name / "nccl_trace_rank_0"
        dump.write_bytes(b"")
        os.utime(dump, (time.time() - age, time.time() - age))
    assert [p.parent.name for p in found.records_under(tmp_path)] == ["new"]


# --- the words when nothing diverges ----------------------------------------------------


def _forensics(recorded, compared, error=None, unnamed=0) -> Forensics:
    return Forensics(
        recorded=recorded,
        divergences=(),
        p2p=(),
        analyser="torch",
        directory=Path("/x"),
        compared=compared,
        error=error,
        unnamed=unnamed,
    )


AGREE = "the ranks' flight records agree (no collective where they diverge)"


@pytest.mark.parametrize(
    ("recorded", "compared", "error", "unnamed", "said"),
    [
        ((0, 1), (0, 1), None, 0, AGREE),
        ((0, 1, 2), (0, 1, 2), None, 0, AGREE),
        ((0,), (0,), None, 0, "only rank 0 left a flight record: nothing to compare it with"),
        (
            (0, 1),
            (1,),
            None,
            0,
            "only rank 1's flight record holds collectives (rank 0: none): nothing to compare "
            "it with",
        ),
        ((0, 1), (), None, 0, "no flight record holds a collective to compare"),
        (
            (0, 1),
            (),
            None,
            8,
            "no flight record holds a collective to compare; 8 collective(s) of process groups "
            "without known members (unnamed, as Gloo records them under "
            "TORCH_DISTRIBUTED_DEBUG=DETAIL) not compared",
        ),
        (
            (0, 1),
            (0, 1),
            "KeyError: ('', 0)",
            0,
            "could not be compared by torch's analyser (KeyError: ('', 0)); a plain comparison "
            "of ranks 0,1 found no collective where they diverge",
        ),
    ],
)
def test_agree_only_when_two_ranks_were_compared(recorded, compared, error, unnamed, said) -> None:
    found = collectives.lines(_forensics(recorded, compared, error, unnamed))
    assert found == [said]


def test_a_file_without_a_record_is_said_empty_or_unreadable(tmp_path: Path) -> None:
    ours = tmp_path / "flight"
    ours.mkdir()
    (ours / "rank0.json").write_text('{"rank": 0, "entries": []}')
    (ours / "rank1.json").write_bytes(b"")
    (ours / "rank2.json").write_text("{half")
    (tmp_path / "flight-rank3").write_bytes(b"")
    files = [*sorted(ours.iterdir()), tmp_path / "flight-rank3"]
    assert collectives.unread(files, {0}) == ((1, "empty"), (2, "unreadable"), (3, "empty"))
    alone = replace(_forensics((0,), (0,)), unread=((1, "empty"),))
    assert collectives.lines(alone) == [
        "only rank 0's flight record could be read (rank 1's is empty): nothing to compare it with"
    ]
    both = replace(_forensics((0, 1), (1,)), unread=((2, "unreadable"),))
    assert collectives.lines(both) == [
        "only rank 1's flight record holds collectives (rank 0: none; rank 2's could not be "
        "read): nothing to compare it with"
    ]


def test_an_analyser_error_in_the_json_is_never_agreement() -> None:
    result = {"ranks": [0, 1], "compared": [0, 1], "analyser_error": "KeyError: ('', 0)"}
    forensics = collectives.parse(result, Path("/x"))
    [line] = collectives.lines(forensics)
    assert "agree" not in line and "could not be compared" in line
    assert forensics.analyser.startswith("plain comparison (torch's analyser: KeyError")


def _entry(seq: int, op: str, group: list[str], size: int = 8) -> dict:
    return {
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "pg_id": 0,
        "process_group": group,
        "profiling_name": f"gloo:{op}",
        "input_sizes": [[size]] if op != "barrier" else [],
        "input_dtypes": ["Float"] if op != "barrier" else [],
        "output_sizes": [[size]] if op != "barrier" else [],
        "output_dtypes": ["Float"] if op != "barrier" else [],
        "state": "scheduled",
        "is_p2p": False,
        "retired": False,
        "time_created_ns": 1,
        "timeout_ms": 1800000,
        "frames": [],
        "record_id": seq,
    }


def _write(directory: Path, rank: int, entries: list[dict], pg_config: dict) -> None:
    directory.mkdir(exist_ok=True)
    ours = {
        "rank": rank,
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
    }
    record = {"version": "2.10", "entries": entries, "pg_config": pg_config, "safelaunch": ours}
    (directory / f"rank{rank}.json").write_text(json.dumps(record))


def test_records_of_unnamed_groups_are_left_out_not_an_analyser_error(tmp_path: Path) -> None:
    # the shape of a Gloo rerun under TORCH_DISTRIBUTED_DEBUG=DETAIL (isolate_gloo/flight)
    unnamed = {"": {"name": "", "desc": "", "ranks": "[]"}}
    for rank in (0, 1):
        entries = [_entry(1, "all_reduce", ["", ""]), _entry(3, "all_gather", ["", ""], 1)]
        _write(tmp_path, rank, entries, unnamed)
    result = flightcheck.analyse([tmp_path])
    assert "analyser_error" not in result
    assert (result["compared"], result["unnamed"], result["divergences"]) == ([], 4, [])
    [line] = collectives.lines(collectives.parse(result, tmp_path))
    assert line.startswith("no flight record holds a collective to compare; 4 collective(s)")


# --- stop labels ------------------------------------------------------------------------


def _exit(code: int, after: float) -> RankExit:
    return builders.rank_exit(0, returncode=code, ended_after=after)


@pytest.mark.parametrize(
    ("code", "sent", "label"),
    [
        (-signal.SIGTERM, STOP_SIGNALS, "stopped by safelaunch (SIGTERM)"),
        (-signal.SIGKILL, STOP_SIGNALS, "stopped by safelaunch (SIGKILL)"),
        (-signal.SIGINT, STOP_SIGNALS | {signal.SIGINT}, "stopped by safelaunch (SIGINT)"),
        (1, STOP_SIGNALS, "stopped by safelaunch, then exited with code 1"),
        # safelaunch never sends SIGSEGV: the rank crashed itself
        (
            -signal.SIGSEGV,
            STOP_SIGNALS,
            "died of SIGSEGV (exit 139) after safelaunch began stopping the job",
        ),
        (-signal.SIGINT, STOP_SIGNALS, "died of SIGINT (exit 130) after safelaunch began stopping"),
        # the dump signal asks for records; it stops nothing
        (
            -DUMP_SIGNAL,
            STOP_SIGNALS,
            f"died of signal {int(DUMP_SIGNAL)} (exit {128 + DUMP_SIGNAL}): exiting on its own "
            "when safelaunch's request for its stacks and flight record reached it",
        ),
    ],
)
def test_stopped_by_safelaunch_only_for_what_it_sent(code: int, sent, label: str) -> None:
    result = judge(_exit(code, after=5.0), teardown_after=4.0, sent=frozenset(sent))
    assert result.state == "stopped"
    assert result.stop_label().startswith(label)


# --- the rank side: the dump signal during the rank's own exit --------------------------

SLOW_EXIT = """
import os, sys, time
class Slow:
    # runs as the interpreter tears its modules down, after atexit: what it needs is bound
    def __del__(self, write=os.write, sleep=time.sleep):
        write(1, b"finalizing\\n")
        sleep(1.0)
sys.modules["slow_teardown"] = type(sys)("slow_teardown")
sys.modules["slow_teardown"].held = Slow()
print("armed", flush=True)
sys.stdin.readline()  # the test looked at the rank as it runs
raise SystemExit(1)
"""


def test_a_rank_ignores_the_dump_signal_once_it_tears_down(tmp_path: Path) -> None:
    script = tmp_path / "slow_exit.py"
    script.write_text(SLOW_EXIT)
    env = {
        **os.environ,
        names.DUMP_SIGNAL: str(int(DUMP_SIGNAL)),
        names.FLIGHT_DIR: str(tmp_path / "flight"),
        names.STACKS_FILE: str(tmp_path / "stacks.txt"),
    }
    code = "from safelaunch.rank.bootstrap import main; main()"
    rank = subprocess.Popen(
        [sys.executable, "-u", "-c", code, "script", str(script)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert rank.stdin is not None and rank.stdout is not None
    assert rank.stdout.readline().strip() == "armed"
    assert catches(rank.pid, DUMP_SIGNAL) and not exiting(rank.pid)
    rank.stdin.write("exit\n")
    rank.stdin.close()
    assert rank.stdout.readline().strip() == "finalizing"
    # CPython has reset its handlers by now: without the rank's last exit handler the
    # signal's default action (or a handler into a finished interpreter) would end it
    assert exiting(rank.pid) and not catches(rank.pid, DUMP_SIGNAL)
    os.kill(rank.pid, DUMP_SIGNAL)
    assert rank.wait(timeout=30) == 1


# --- end to end -------------------------------------------------------------------------

DIVERGE = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
x = torch.ones(8)
for step in range(3):
    if rank == 1 and step == 1:
        dist.barrier()
    else:
        dist.all_reduce(x)
dist.destroy_process_group()
"""

DIVERGENCE = (
    "group [0,1] (default group), collective #2 all_reduce(float32[8]): "
    "rank 1 called barrier() instead"
)


@pytest.mark.slow
def test_explain_after_an_isolation_rerun_names_the_attempts_divergence(tmp_path: Path) -> None:
    script = tmp_path / "diverge.py"
    script.write_text(DIVERGE)
    run = launch(
        tmp_path,
        "--nproc-per-node=2",
        "--hang-timeout=4",
        "--shutdown-timeout=5",
        "--isolate=always",
        "--isolate-timeout=60",
        "--no-lint",
        str(script),
        timeout=150,
    )
    assert run.returncode == 124, run.stderr
    assert f"collectives: {DIVERGENCE}" in run.stderr
    assert sorted(p.name for p in (run.run_dir / "isolate_gloo" / "flight").iterdir()) == [
        "rank0.json",
        "rank1.json",
    ]
    explained = subprocess.run(
        safelaunch_cmd("explain", str(run.run_dir)), capture_output=True, text=True, timeout=90
    )
    assert explained.returncode == 0, explained.stderr
    text = explained.stdout
    assert f"2 file(s) in {run.attempt() / 'flight'} (ranks 0,1)" in text, text
    assert f"  collectives: {DIVERGENCE}" in text, text
    assert "agree" not in text and "isolate_gloo" not in text


LEAVES_SLOWLY = """
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
here = os.path.dirname(os.path.abspath(__file__))
if rank == 1:
    open(os.path.join(here, "rank1.pid"), "w").write(str(os.getpid()))
dist.all_reduce(torch.ones(4))
if rank == 1:  # fails once rank 0 is tearing its interpreter down
    while not os.path.exists(os.path.join(here, "rank0-finalizing")):
        time.sleep(0.01)
    raise RuntimeError("rank 1 fails while rank 0 exits")
dist.destroy_process_group()

class Slow:
    # rank 0's teardown, after atexit: until the launcher reaped rank 1 (and noticed it),
    # then its own end (not torch's teardown: seconds on a loaded machine)
    def __del__(
        self, exists=os.path.exists, sleep=time.sleep, join=os.path.join, here=here, end=os._exit
    ):
        open(join(here, "rank0-finalizing"), "w").close()
        pid = open(join(here, "rank1.pid")).read()
        for _ in range(2000):
            if not exists(f"/proc/{pid}"):
                break
            sleep(0.01)
        sleep(0.2)
        end(0)
sys.modules["slow_teardown"] = type(sys)("slow_teardown")
sys.modules["slow_teardown"].held = Slow()
"""


@pytest.mark.slow
def test_a_rank_exiting_on_its_own_during_the_dump_request_is_not_stopped(tmp_path: Path) -> None:
    script = tmp_path / "leaves.py"
    script.write_text(LEAVES_SLOWLY)
    run = launch(tmp_path, "--nproc-per-node=2", "--no-lint", str(script), timeout=120)
    assert run.returncode == 1, run.stderr
    assert "FAILED: rank 1 exited with code 1" in run.stderr
    report = json.loads((run.attempt() / "report.json").read_text())
    rank0 = report["ranks"][0]
    assert "rank 0: stopped by safelaunch" not in run.stderr, run.stderr
    assert (rank0["state"], rank0["exit_code"], rank0["signal"]) == ("succeeded", 0, None)
