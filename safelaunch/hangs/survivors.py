"""Where the surviving ranks were when a rank failed: their stacks, taken before teardown.

A failure's summary otherwise shows only how the other ranks ended, after safelaunch
stopped them; where they were waiting (for the failed rank, or for one of their own) is
gone with their processes. So before the SIGTERM every surviving rank is asked at once
for all its threads' stacks and its flight record (the dump signal, as at a hang), under
one short deadline. The record has the shape of a hang's evidence, so the hang analysis's
grouping reads it (hangs/analysis.py `where_they_were`). A job that never reached
torch.distributed, or whose ranks have all ended, is not asked and pays nothing.
"""

from __future__ import annotations

import time

from safelaunch.flights.request import catches, request_records, uses_collectives
from safelaunch.hangs.detection import HangEvidence, RankProgress, Survivors
from safelaunch.hangs.stack_evidence import collect_stacks, has_data
from safelaunch.plan import DUMP_SIGNAL, LaunchPlan
from safelaunch.rundir import stack_files
from safelaunch.supervisor.procs import is_alive, process_state
from safelaunch.supervisor.spawn import StartedRank

# One deadline for every survivor's stacks and flight record: faulthandler answers in
# ~1 ms; a rank that holds the GIL in native code never does, and the teardown waits.
SURVIVOR_WAIT = 2.0
NO_ANSWER = "did not answer the request for its stacks"
# a rank past its last exit handler ignores the signal; one whose handler was replaced
# would die of it
EXITING = "not asked for its stacks: it did not catch the dump signal (exiting on its own?)"


def take_survivors(
    live: list[StartedRank],
    progress: list[RankProgress],
    plan: LaunchPlan,
    after: str,
    failed_rank: int | None,
) -> Survivors | None:
    """Every live rank's stacks and flight record, bounded; None when nobody was asked.

    The flight records are always requested (ranks exiting on their own are waited for,
    as before); stacks only when some survivor reached torch.distributed.
    """
    started, asked_at = time.monotonic(), time.time()
    if not any(uses_collectives(s) for s in live):
        request_records(live, plan.attempt_dir, signalled=False)
        return None
    asked = {s.spec.rank for s in live if catches(s.process.pid, DUMP_SIGNAL)}
    target = stack_files.directory(plan.attempt_dir)
    files, children = collect_stacks(
        # no py-spy: ~1 s a rank, while the failure waits for its summary
        live,
        target,
        wait=SURVIVOR_WAIT,
        spy_grace=None,
        only_catching=True,
    )
    # ranks already exiting on their own: waited for, so that they do not read as stopped
    request_records(live, plan.attempt_dir, signalled=True, since=asked_at)
    alive = [s for s in live if is_alive(s.process.pid)]
    ranks = {s.spec.rank for s in alive}
    evidence = HangEvidence(
        detected_at=asked_at,
        timeout=plan.hang_timeout,
        interval=plan.heartbeat_interval,
        ranks=tuple(p for p in progress if p.rank in ranks),
        states={s.spec.rank: process_state(s.process.pid) for s in alive},
        stack_files={r: f for r, f in files.items() if r in ranks},
        children={r: c for r, c in children.items() if r in ranks},
        unanswered={
            s.spec.rank: NO_ANSWER if s.spec.rank in asked else EXITING
            for s in alive
            if s.spec.bootstrapped and not has_data(s)
        },
    )
    survivors = Survivors(
        after=after, failed_rank=failed_rank, evidence=evidence, took=time.monotonic() - started
    )
    save_survivors(survivors, plan)
    return survivors


def save_survivors(survivors: Survivors, plan: LaunchPlan) -> None:
    """stacks/failure.json: what was asked, who answered, in what process state."""
    evidence = survivors.evidence
    stack_files.write_failure_evidence(
        plan.attempt_dir,
        {
            "after": survivors.after,
            "failed_rank": survivors.failed_rank,
            "taken_at": evidence.detected_at,
            "took_s": round(survivors.took, 3),
            "states": {str(k): v for k, v in evidence.states.items()},
            "answered": sorted(evidence.stack_files),
            "unanswered": {str(k): v for k, v in evidence.unanswered.items()},
            "ranks": [
                {"rank": p.rank, "beat": None if p.beat is None else p.beat.as_dict()}
                for p in evidence.ranks
            ],
        },
    )
