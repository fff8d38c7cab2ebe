"""Isolation: whether to rerun a failed job, how far, and what the rerun proves.

The question that costs days is "NCCL/the network, or my code?". The job is rerun
with Gloo in place of NCCL (and, on request, with one rank, or with one NCCL transport
disabled at a time); comparing the two endings answers it. Pure rules over
outcomes, diagnoses and the files the ranks wrote; the orchestrator runs the reruns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from safelaunch.diagnose import Diagnosis, describe_ending, read_tail
from safelaunch.diagnose.gloo_limits import GLOO_LIMITS
from safelaunch.diagnose.match import cause, matches
from safelaunch.diagnose.policy import Backend, backend_of
from safelaunch.diagnose.signatures import ENVIRONMENT, Signature
from safelaunch.outcome import FAILED, HUNG, INTERRUPTED, PASSED, SUCCEEDED, TIMEBOXED, Outcome
from safelaunch.plan import LaunchPlan, Rerun, Timebox
from safelaunch.supervisor.hang import read_beat

TIME_FACTOR = 3.0  # with no step or collective count known: rerun this many times as long
MIN_RUN = 10.0  # ... and at least this long
# Transports to disable one at a time, and what each one is.
NCCL_TRANSPORTS = (
    ("NCCL_P2P_DISABLE", "p2p", "GPU peer-to-peer (NVLink/PCIe): ACS/IOMMU, nvidia-smi topo -m"),
    ("NCCL_SHM_DISABLE", "shm", "shared memory between processes: /dev/shm size, IPC namespace"),
    ("NCCL_IB_DISABLE", "ib", "InfiniBand/RoCE: HCA state (ibstat), NCCL_IB_HCA, GID index"),
)
NCCL_STEPS = (
    "pin the network interface: NCCL_SOCKET_IFNAME=<interface> (ip -br addr lists them)",
    "find the transport: rerun with --isolate-nccl (P2P, SHM, IB disabled one at a time)",
    "read NCCL's own log: nccl-rank*.log in the attempt directory (NCCL_DEBUG=INFO)",
)

# verdict kinds
COMM_LAYER = "communication layer"
PROGRAM = "program"
DIFFERS = "differs"
GLOO_CANNOT = "gloo cannot run this program"
NOT_REPRODUCED = "did not reproduce"
INCONCLUSIVE = "inconclusive"
NOT_FINISHED = "interrupted"
DISTRIBUTED = "distributed fault"
SINGLE = "single-process fault"
TRANSPORT = "transport"
NO_TRANSPORT = "no transport"


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


def detail_safe(job: CommUse, environ: Mapping[str, str]) -> bool:
    """The Gloo rerun may get TORCH_DISTRIBUTED_DEBUG=DETAIL: see gloo_rerun."""
    return job.initialised and not job.ddp and "TORCH_DISTRIBUTED_DEBUG" not in environ


@dataclass(frozen=True, slots=True, kw_only=True)
class RerunEnd:
    """Which rerun it was and how it ended."""

    name: str  # its directory
    purpose: str
    status: str
    duration: float
    attempt_dir: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What one rerun proves."""

    ran: RerunEnd
    kind: str
    headline: str
    details: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = ()
    signature: str | None = None  # the rerun's failure signature, when it failed
    mismatch: str | None = None  # a collective mismatch named from the ranks' ledgers


def failure_point(plan: LaunchPlan, outcome: Outcome, cap: float) -> Timebox:
    """How far the failed attempt got: its ranks' last step or collective count, or its time."""
    beats = [read_beat(w.rank, w.heartbeat_file) for w in plan.workers]
    steps = [b.step for b in beats if b is not None and b.step is not None]
    seqs = [b.seq for b in beats if b is not None and b.seq is not None]
    if steps:
        return Timebox(past_step=max(steps), past_seq=None, after_s=None, cap_s=cap)
    if seqs and max(seqs) > 0:
        return Timebox(past_step=None, past_seq=max(seqs), after_s=None, cap_s=cap)
    after = max(MIN_RUN, outcome.duration * TIME_FACTOR)
    return Timebox(past_step=None, past_seq=None, after_s=min(after, cap), cap_s=cap)


def gloo_rerun(timebox: Timebox, job: CommUse, environ: Mapping[str, str]) -> tuple[Rerun, str]:
    """The job again, NCCL swapped for Gloo in every rank; and which collective checks it has.

    torch's own checks (TORCH_DISTRIBUTED_DEBUG=DETAIL) only where they are safe: the
    job initialised a process group and built no DDP model (DETAIL segfaults DDP's
    constructor in torch 2.13), and the user has not set the variable.
    """
    env = {}
    if "TORCH_DISTRIBUTED_DEBUG" in environ:
        checks = "collective checks: your TORCH_DISTRIBUTED_DEBUG, and safelaunch's record"
    elif detail_safe(job, environ):
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        checks = (
            "collective checks: TORCH_DISTRIBUTED_DEBUG=DETAIL in the Gloo rerun (the job "
            "built no DDP model), and safelaunch's record of each rank's collectives"
        )
    else:
        why = "the job built a DDP model" if job.ddp else "the job never got that far"
        checks = (
            f"collective checks: safelaunch's record of each rank's collectives (no "
            f"TORCH_DISTRIBUTED_DEBUG=DETAIL: {why}, and DETAIL crashes DDP in torch 2.13)"
        )
    rerun = Rerun(
        name="isolate_gloo", purpose="on Gloo", gloo=True, nproc=None, env=env, timebox=timebox
    )
    return rerun, checks


def single_rerun(timebox: Timebox) -> Rerun:
    """The job again with one rank (the seed's ladder: one process before many)."""
    return Rerun(
        name="isolate_single", purpose="with one rank", gloo=False, nproc=1, env={}, timebox=timebox
    )


def transport_reruns(timebox: Timebox, environ: Mapping[str, str]) -> tuple[list[Rerun], list[str]]:
    """One rerun per NCCL transport the user has not already set; notes for the ones skipped."""
    reruns, skipped = [], []
    for variable, short, _ in NCCL_TRANSPORTS:
        if variable in environ:  # the user's setting wins: that experiment is theirs
            skipped.append(f"{variable} is already set to {environ[variable]!r}: not varied")
            continue
        reruns.append(
            Rerun(
                name=f"isolate_nccl_{short}",
                purpose=f"with {variable}=1",
                gloo=False,
                nproc=None,
                env={variable: "1"},
                timebox=timebox,
            )
        )
    return reruns, skipped


def read_comm(attempt_dir: Path) -> CommUse:
    """What the ranks' rank<N>.comm.json files say (absent: the job never initialised)."""
    requested, used, swapped, initialised, ddp = set(), set(), False, False, False
    attempted = False
    for path in sorted(attempt_dir.glob("rank*.comm.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        attempted = True
        initialised = initialised or record.get("used") is not None  # written after init
        ddp = ddp or bool(record.get("ddp"))
        if record.get("requested") is not None:
            requested.add(str(record["requested"]).lower())
        if record.get("used") is not None:
            used.add(str(record["used"]).lower())
        swapped = swapped or bool(record.get("swapped"))
    return CommUse(
        requested=tuple(sorted(requested)),
        used=tuple(sorted(used)),
        swapped=swapped,
        initialised=initialised,
        ddp=ddp,
        attempted=attempted,
    )


def _ledger(path: Path) -> dict[int, tuple[str, str]]:
    entries = {}
    try:
        for line in path.read_text(errors="replace").splitlines():
            number, op, what = [*line.split("\t"), "", ""][:3]
            if number.isdigit():
                entries[int(number)] = (op, what)
    except OSError:
        pass
    return entries


def _ranks_label(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {','.join(map(str, ranks))}"


def _ledgers(attempt_dir: Path) -> dict[int, dict[int, tuple[str, str]]]:
    ledgers: dict[int, dict[int, tuple[str, str]]] = {}
    for path in attempt_dir.glob("rank*.collectives.log"):
        digits = path.name.removeprefix("rank").split(".", 1)[0]
        if digits.isdigit():
            ledgers[int(digits)] = _ledger(path)
    return ledgers


def collective_lag(attempt_dir: Path) -> str | None:
    """In a hang: ranks that called fewer collectives than the others (behind, or skipped one)."""
    counts: dict[int, list[int]] = {}
    for rank, entries in sorted(_ledgers(attempt_dir).items()):
        counts.setdefault(len(entries), []).append(rank)
    if len(counts) < 2:
        return None
    parts = [f"{_ranks_label(ranks)} called {n}" for n, ranks in sorted(counts.items())]
    return "collectives called from Python: " + "; ".join(parts)


def collective_mismatch(attempt_dir: Path) -> str | None:
    """The first collective the ranks called differently (op, shape, dtype), by their ledgers."""
    ledgers = _ledgers(attempt_dir)
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
                f"{_ranks_label(ranks)} called {op}({ledgers[ranks[0]][number][1]})"
                for (op, _), ranks in calls.items()
            ]
            return f"collective #{number} differs: " + "; ".join(parts)
    return None


def _gloo_limit(diagnosis: Diagnosis, outcome: Outcome) -> Signature | None:
    if diagnosis.root_cause is None:
        return None
    text = diagnosis.error.line if diagnosis.error else diagnosis.evidence or ""
    found = matches(text, None, GLOO_LIMITS) or matches(
        read_tail(diagnosis.root_cause.log_path), None, GLOO_LIMITS
    )
    match = cause(found)
    return match.signature if match else None


def _failure_key(diagnosis: Diagnosis) -> tuple[str, ...]:
    if diagnosis.signature is not None:
        return ("signature", diagnosis.signature.id)
    if diagnosis.error is not None:
        kind = diagnosis.error.line.split(":", 1)[0]
        return ("error", kind, diagnosis.error.location or "")
    cause_ = diagnosis.root_cause
    return ("ended", cause_.how_it_ended() if cause_ else "")


def _same_failure(a: Outcome, da: Diagnosis, b: Outcome, db: Diagnosis) -> bool:
    if a.status == HUNG or b.status == HUNG:
        return a.status == b.status
    return _failure_key(da) == _failure_key(db)


DDP_UNDER_DETAIL = (
    "got past the point where the job failed, as far as building its DDP model (which "
    "torch 2.13 cannot do under TORCH_DISTRIBUTED_DEBUG=DETAIL)"
)


def _ran_through(outcome: Outcome, crashed_in_ddp: bool = False) -> str:
    if crashed_in_ddp:
        return DDP_UNDER_DETAIL
    if outcome.status == SUCCEEDED:
        return f"ran to completion ({outcome.duration:.1f} s)"
    return f"got past the point where the job failed ({outcome.timebox_note})"


def _crashed_in_ddp_under_detail(
    job: CommUse, rerun: Rerun, comm: CommUse, outcome: Outcome
) -> bool:
    """The rerun died building a DDP model the job never reached: it got further, so it passed.

    DETAIL is only turned on for jobs that built no DDP model; one that fails before
    it does and then, on Gloo, gets past that point, meets torch 2.13's crash.
    """
    return (
        outcome.status == FAILED
        and rerun.env.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL"
        and comm.ddp
        and not job.ddp
    )


def _ended(rerun: Rerun, outcome: Outcome) -> RerunEnd:
    return RerunEnd(
        name=rerun.name,
        purpose=rerun.purpose,
        status=outcome.status,
        duration=outcome.duration,
        attempt_dir=outcome.attempt_dir,
    )


def _unfinished(rerun: Rerun, outcome: Outcome) -> Verdict | None:
    if outcome.status == INTERRUPTED:
        return Verdict(
            kind=NOT_FINISHED,
            headline="the rerun was interrupted: no verdict",
            ran=_ended(rerun, outcome),
        )
    if outcome.status == TIMEBOXED:
        return Verdict(
            kind=INCONCLUSIVE,
            headline=f"the rerun neither failed nor got past the job's failure point: "
            f"{outcome.timebox_note}",
            next_steps=("give it longer: --isolate-timeout SECONDS",),
            ran=_ended(rerun, outcome),
        )
    return None


def gloo_verdict(
    job: Outcome,
    job_diagnosis: Diagnosis,
    job_comm: CommUse,
    rerun: Rerun,
    outcome: Outcome,
    diagnosis: Diagnosis,
) -> Verdict:
    """Communication layer, program, differs, or Gloo cannot run it: the Gloo rerun's meaning."""
    unfinished = _unfinished(rerun, outcome)
    if unfinished is not None:
        return unfinished
    comm = read_comm(outcome.attempt_dir)
    mismatch = collective_mismatch(outcome.attempt_dir)
    lag = collective_lag(outcome.attempt_dir) if outcome.status == HUNG else None
    ran = _ended(rerun, outcome)
    swapped = (
        comm.swapped
        or job_comm.nccl
        or (job_diagnosis.signature is not None and job_diagnosis.signature.id.startswith("nccl"))
    )
    crashed_in_ddp = _crashed_in_ddp_under_detail(job_comm, rerun, comm, outcome)
    if outcome.status in (SUCCEEDED, PASSED) or crashed_in_ddp:
        if swapped:
            signature = job_diagnosis.signature
            steps = signature.next_steps if signature else ()
            if signature is None or signature.klass != ENVIRONMENT:  # e.g. not NCCL's setup
                steps = (*steps, *NCCL_STEPS)
            return Verdict(
                kind=COMM_LAYER,
                headline=f"on Gloo the same job {_ran_through(outcome, crashed_in_ddp)}: the "
                "fault is in NCCL or the network/GPU interconnect, not in your program",
                details=(f"the job: {describe_ending(job, job_diagnosis)}",),
                next_steps=tuple(dict.fromkeys(steps))[:5],
                ran=ran,
            )
        return Verdict(
            kind=NOT_REPRODUCED,
            headline="run again on the same backend (it never used NCCL), the job "
            f"{_ran_through(outcome, crashed_in_ddp)}: an intermittent fault (timing, a flaky "
            "peer or network, "
            "resources), not a deterministic one in the program",
            details=(f"the job: {describe_ending(job, job_diagnosis)}",),
            next_steps=("look for what differs between runs: node, load, data order, timing",),
            ran=ran,
        )
    limit = _gloo_limit(diagnosis, outcome) if swapped else None
    if limit is not None:
        return Verdict(
            kind=GLOO_CANNOT,
            headline=f"the program uses something Gloo lacks ({limit.meaning}): this rerun "
            "cannot tell NCCL from the program",
            details=(f"the rerun: {describe_ending(outcome, diagnosis)}",),
            next_steps=limit.next_steps,
            signature=limit.id,
            ran=ran,
        )
    rerun_signature = diagnosis.signature.id if diagnosis.signature else None
    if mismatch is not None or _same_failure(job, job_diagnosis, outcome, diagnosis):
        details = [f"the rerun: {describe_ending(outcome, diagnosis)}"]
        details[:0] = [line for line in (mismatch, lag) if line]
        steps = diagnosis.signature.next_steps if diagnosis.signature else ()
        return Verdict(
            kind=PROGRAM,
            headline=_program_headline(outcome, mismatch),
            details=tuple(details),
            next_steps=steps,
            signature=rerun_signature,
            mismatch=mismatch,
            ran=ran,
        )
    return Verdict(
        kind=DIFFERS,
        headline="it fails on Gloo too, but differently: both are shown",
        details=(
            f"the job:   {describe_ending(job, job_diagnosis)}",
            f"the rerun: {describe_ending(outcome, diagnosis)}",
        ),
        next_steps=diagnosis.signature.next_steps if diagnosis.signature else (),
        signature=rerun_signature,
        ran=ran,
    )


def _program_headline(outcome: Outcome, mismatch: str | None) -> str:
    if mismatch is not None:
        how = "the ranks call different collectives (seen in the Gloo rerun)"
    elif outcome.status == HUNG:
        how = "it hangs on Gloo too"
    else:
        how = "it fails the same way on Gloo"
    return f"{how}: the fault is in the program, not in the communication layer"


def single_verdict(
    job: Outcome, job_diagnosis: Diagnosis, rerun: Rerun, outcome: Outcome, diagnosis: Diagnosis
) -> Verdict:
    """With one rank: does the fault need several ranks, or is it in every process?"""
    unfinished = _unfinished(rerun, outcome)
    if unfinished is not None:
        return unfinished
    ran = _ended(rerun, outcome)
    if outcome.status in (SUCCEEDED, PASSED):
        return Verdict(
            kind=DISTRIBUTED,
            headline=f"with one rank the job {_ran_through(outcome)}: the fault needs several "
            "ranks (communication, or code that differs between ranks)",
            ran=ran,
        )
    if _same_failure(job, job_diagnosis, outcome, diagnosis):
        return Verdict(
            kind=SINGLE,
            headline="it fails the same way with one rank: debug it as a single process "
            "(a debugger and prints work there)",
            details=(f"with one rank: {describe_ending(outcome, diagnosis)}",),
            next_steps=(
                "RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 "
                "python -m pdb <script> <args>",
            ),
            signature=diagnosis.signature.id if diagnosis.signature else None,
            ran=ran,
        )
    return Verdict(
        kind=DIFFERS,
        headline="with one rank it fails differently: both are shown",
        details=(
            f"the job:       {describe_ending(job, job_diagnosis)}",
            f"with one rank: {describe_ending(outcome, diagnosis)}",
        ),
        signature=diagnosis.signature.id if diagnosis.signature else None,
        ran=ran,
    )


def transport_verdict(rerun: Rerun, outcome: Outcome, diagnosis: Diagnosis) -> Verdict:
    """With one NCCL transport disabled: did the failure go away?"""
    unfinished = _unfinished(rerun, outcome)
    if unfinished is not None:
        return unfinished
    ran = _ended(rerun, outcome)
    variable = next(iter(rerun.env))
    about = next((what for name, _, what in NCCL_TRANSPORTS if name == variable), "")
    if outcome.status in (SUCCEEDED, PASSED):
        return Verdict(
            kind=TRANSPORT,
            headline=f"the failure goes away {rerun.purpose}: {about}",
            next_steps=(
                f"run with {variable}=1 until that transport is fixed (it costs bandwidth)",
            ),
            ran=ran,
        )
    return Verdict(
        kind=NO_TRANSPORT,
        headline=f"it still fails {rerun.purpose}",
        details=(f"the rerun: {describe_ending(outcome, diagnosis)}",),
        ran=ran,
    )
