"""What the ranks' files say, read in one place for the verdicts, which read nothing.

Three kinds of file matter: each rank's backend record (rundir/comm_file.py: what it asked
init_process_group for, what it got, whether it built a DDP model), the Gloo rerun's
ledger of collectives (rundir/ledger_file.py) and the end of the root cause's log.
Reading is here; comparing ledgers is pure (collective_mismatch, collective_lag).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from safelaunch.diagnose import Diagnosis, read_tail
from safelaunch.isolation.policy import Backend, backend_of
from safelaunch.outcome import Outcome
from safelaunch.plan import LaunchPlan
from safelaunch.ranktext import ranks_label
from safelaunch.rundir import comm_file, heartbeat_file, ledger_file
from safelaunch.rundir.heartbeat_file import Beat

# One rank's ledger: collective number -> (op, what it was called with: dtype, shape)
Ledger = Mapping[int, tuple[str, str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class CommUse:
    """The backends the ranks asked for, and whether the rerun swapped them."""

    requested: tuple[str, ...]
    used: tuple[str, ...]
    swapped: bool
    initialised: bool = False  # some rank's init_process_group returned
    ddp: bool = False  # some rank built a DistributedDataParallel
    attempted: bool = False  # some rank called init_process_group (its record exists)

    @property
    def nccl(self) -> bool:
        """Asked for NCCL, or got it by default (no backend named, on a CUDA build)."""
        return any("nccl" in backend for backend in (*self.requested, *self.used))

    @property
    def backend(self) -> Backend:
        """NCCL up, NCCL asked for, Gloo only, or no process group: the policy's input."""
        return backend_of(self.requested, self.used, self.attempted, self.initialised)


NO_COMM = CommUse(requested=(), used=(), swapped=False)  # no rank wrote a record


@dataclass(frozen=True, slots=True, kw_only=True)
class RankFiles:
    """What one run's rank files say (the job's last attempt, or a rerun)."""

    comm: CommUse = NO_COMM
    ledgers: Mapping[int, Ledger] = field(default_factory=dict)  # by rank
    root_tail: str = ""  # the end of the root cause's log ("" without a root cause)


def read_rank_files(outcome: Outcome, diagnosis: Diagnosis) -> RankFiles:
    """Everything a verdict needs from the files of this attempt or rerun."""
    root = diagnosis.root_cause
    return RankFiles(
        comm=read_comm(outcome.attempt_dir),
        ledgers=read_ledgers(outcome.attempt_dir),
        root_tail=read_tail(root.log_path) if root is not None else "",
    )


def read_beats(plan: LaunchPlan) -> list[Beat | None]:
    """Each rank's last heartbeat: how far the attempt got (see reruns.failure_point)."""
    return [heartbeat_file.read(w.rank, w.heartbeat_file) for w in plan.workers]


def read_comm(attempt_dir: Path) -> CommUse:
    """What the ranks' backend records say (none: the job never initialised)."""
    records = comm_file.read_all(attempt_dir).values()
    requested = {r.requested.lower() for r in records if r.requested is not None}
    used = {r.used.lower() for r in records if r.used is not None}
    return CommUse(
        requested=tuple(sorted(requested)),
        used=tuple(sorted(used)),
        swapped=any(r.swapped for r in records),
        initialised=bool(used),  # `used` is written once init returned
        ddp=any(r.ddp for r in records),
        attempted=bool(records),
    )


def read_ledgers(attempt_dir: Path) -> dict[int, Ledger]:
    """Every rank's ledger of collectives (written in the Gloo rerun only)."""
    return dict(ledger_file.read_all(attempt_dir))


def collective_lag(ledgers: Mapping[int, Ledger]) -> str | None:
    """In a hang: ranks that called fewer collectives than the others (behind, or skipped one)."""
    counts: dict[int, list[int]] = {}
    for rank, entries in sorted(ledgers.items()):
        counts.setdefault(len(entries), []).append(rank)
    if len(counts) < 2:
        return None
    parts = [f"{ranks_label(ranks)} called {n}" for n, ranks in sorted(counts.items())]
    return "collectives called from Python: " + "; ".join(parts)


def collective_mismatch(ledgers: Mapping[int, Ledger]) -> str | None:
    """The first collective the ranks called differently (op, shape, dtype), by their ledgers."""
    if len(ledgers) < 2:
        return None
    common = set.intersection(*(set(entries) for entries in ledgers.values()))
    for number in sorted(common):
        calls: dict[tuple[str, str], list[int]] = {}
        for rank in sorted(ledgers):
            op, what = ledgers[rank][number]
            # all_to_all may legitimately differ in size per rank: compare the op only
            key = (op, "" if op.startswith("all_to_all") else what)
            calls.setdefault(key, []).append(rank)
        if len(calls) > 1:
            parts = [
                f"{ranks_label(ranks)} called {op}({ledgers[ranks[0]][number][1]})"
                for (op, _), ranks in calls.items()
            ]
            return f"collective #{number} differs: " + "; ".join(parts)
    return None
