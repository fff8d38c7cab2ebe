"""The call ledger on real Gloo ranks: what the ranks write, and what the readers make of it.

One launch per case of tests/workers/calls_cases.py: a p2p cycle of 3 ranks (a hang), a
rank calling all_reduce with another size in a subgroup of 4 ranks (an abort), a rank
that skips a collective and leaves while its peers wait (their Gloo errors name it by
address only), a rank asleep past the group timeout while its peer waits in irecv().
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import Run, launch, line_of, worker

from safelaunch import exitcodes
from safelaunch.diagnose.arbiter import decide
from safelaunch.diagnose.group_calls import Basis, Oddity, compare_ledgers
from safelaunch.diagnose.ledger_items import items_of_ledgers
from safelaunch.diagnose.waitfor import wait_for
from safelaunch.rundir import calls_file, comm_file

pytestmark = pytest.mark.slow
SCRIPT = worker("calls_cases.py")
PEER = re.compile(r"Connection closed by peer \[([^\]]+)\]:(\d+)")


def _run(tmp_path: Path, case: str, nproc: int) -> Run:
    return launch(
        tmp_path,
        f"--nproc-per-node={nproc}",
        "--hang-timeout=4",  # not less: a loaded machine's `import torch` stalls the heartbeat
        "--shutdown-timeout=5",
        SCRIPT,
        env={"CASE": case},
        timeout=120,
    )


def test_a_p2p_cycle_of_three_ranks_is_a_program_deadlock(tmp_path: Path) -> None:
    run = _run(tmp_path, "cycle", 3)
    assert run.returncode == exitcodes.HANG, run.stderr
    ledgers = calls_file.read_all(run.attempt())
    for rank, ledger in ledgers.items():
        assert ledger.groups[0].ranks == (0, 1, 2)
        last = ledger.calls[-1]  # torch's recv calls irecv: written once, as the user called it
        op = "irecv" if rank == 0 else "recv"  # async, not seen completed: blocked in its wait
        assert (last.op, last.peer, last.blocked) == (op, (rank - 1) % 3, True)
        assert last.where == f"{SCRIPT}:{line_of(SCRIPT, f'dist.{op}(')}"
        assert ledger.calls[0].done and len(ledger.calls) == 2
    graph = wait_for(ledgers)
    assert graph.cycles == ((0, 1, 2),) and graph.culprits == () and graph.sinks == ()
    assert graph.findings[0].startswith("program deadlock: ranks 0-2 wait for each other")


def test_another_size_in_a_subgroup_of_four_is_the_odd_call_by_majority(tmp_path: Path) -> None:
    run = _run(tmp_path, "size", 5)
    assert run.returncode != 0, run.stderr
    ledgers = calls_file.read_all(run.attempt())
    assert ledgers[0].group("1") is None and ledgers[3].group("1") is not None
    comparison = compare_ledgers(ledgers)
    [divergence] = comparison.divergences
    assert (divergence.group, divergence.members, divergence.basis) == (
        "1",
        (1, 2, 3, 4),
        Basis.MAJORITY,
    )
    [odd] = divergence.odd
    assert (odd.rank, odd.oddity) == (3, Oddity.OTHER)
    assert odd.call is not None and odd.call.what == "float32[16]"
    assert divergence.expected is not None and divergence.expected.what == "float32[8]"
    assert f"{SCRIPT}:{line_of(SCRIPT, 'group=group)')}" in divergence.text
    assert wait_for(ledgers).culprits == ()  # they all called it: nobody waits for one rank


def test_a_rank_that_skips_a_collective_is_missing_waited_for_and_named_by_address(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path, "skip", 3)
    assert run.returncode != 0, run.stderr
    ledgers = calls_file.read_all(run.attempt())
    assert [len(ledgers[r].calls) for r in range(3)] == [5, 4, 5]
    [divergence] = compare_ledgers(ledgers).divergences
    assert divergence.position == 5 and [(m.rank, m.oddity) for m in divergence.odd] == [
        (1, Oddity.MISSING)
    ]
    graph = wait_for(ledgers)  # the survivors' last all_reduce never returned
    assert graph.culprits == (1,) and graph.sinks[0].waited_by == (0, 2)
    # Gloo names the peer by address only: each survivor's text maps back to rank 1
    named = []
    for rank in (0, 2):
        found = PEER.search(run.rank_log(rank).decode(errors="replace"))
        if found:
            named.append(comm_file.rank_of_address(run.attempt(), found[1], int(found[2])))
    assert named and set(named) == {1}


def test_an_async_receive_that_timed_out_is_where_the_rank_stopped(tmp_path: Path) -> None:
    """Gloo's work is_completed() once its wait() raised: the ledger must not take it for
    done, or the waiting rank would look like it waits for nobody. With it, the waiter
    keeps to its own loop (it receives first every step) and the sleeper is named."""
    run = _run(tmp_path, "late", 2)
    assert run.returncode != 0, run.stderr
    ledgers = calls_file.read_all(run.attempt())
    last = ledgers[1].calls[-1]
    assert (last.op, last.peer, last.done, last.blocked) == ("irecv", 0, False, True)
    graph = wait_for(ledgers)
    assert [(e.waiter, e.waited_on) for e in graph.edges] == [(1, 0)]
    assert decide(items_of_ledgers(ledgers)).culprits == (0,)
    report = json.loads((run.attempt() / "report.json").read_text())
    assert [c["rank"] for c in report["diagnosis"]["culprits"]] == [0], report["diagnosis"]
