"""The verdicts: what a rerun's ending proves, compared with the job's.

Pure functions of the two runs as seen: outcome, diagnosis and what their rank files
say (evidence.RankFiles, read by the driver); no file is read here, so every verdict is
a row of the table test (tests/test_isolation_verdicts.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from safelaunch.diagnose import Diagnosis, describe_ending
from safelaunch.diagnose.gloo_limits import GLOO_LIMITS
from safelaunch.diagnose.match import cause, matches
from safelaunch.diagnose.signatures import Signature
from safelaunch.isolation.evidence import RankFiles, collective_lag, collective_mismatch
from safelaunch.isolation.reruns import NCCL_TRANSPORTS, Experiment, Planned
from safelaunch.outcome import AttemptStatus, Outcome
from safelaunch.plan import Rerun
from safelaunch.vocab import ENVIRONMENT, StrEnum

NCCL_STEPS = (
    "pin the network interface: NCCL_SOCKET_IFNAME=<interface> (ip -br addr lists them)",
    "find the transport: rerun with --isolate-nccl (P2P, SHM, IB disabled one at a time)",
    "read NCCL's own log: nccl-rank*.log in the attempt directory (NCCL_DEBUG=INFO)",
)


class VerdictKind(StrEnum):
    """What a rerun proves; the value is report.json's `verdict` and the summary's word."""

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
class Seen:
    """One run as the verdicts see it: the job's last attempt, or a rerun."""

    outcome: Outcome
    diagnosis: Diagnosis
    files: RankFiles = field(default_factory=RankFiles)


@dataclass(frozen=True, slots=True, kw_only=True)
class RerunEnd:
    """Which rerun it was and how it ended."""

    name: str  # its directory
    purpose: str
    status: AttemptStatus
    duration: float
    attempt_dir: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What one rerun proves."""

    ran: RerunEnd
    kind: VerdictKind
    headline: str
    details: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = ()
    signature: str | None = None  # the rerun's failure signature, when it failed
    mismatch: str | None = None  # a collective mismatch named from the ranks' ledgers


def judge(planned: Planned, job: Seen, seen: Seen) -> Verdict:
    """The verdict of the rerun's own experiment; `seen` is the rerun."""
    match planned.experiment:
        case Experiment.GLOO:
            return gloo_verdict(job, planned.rerun, seen)
        case Experiment.SINGLE:
            return single_verdict(job, planned.rerun, seen)
        case Experiment.TRANSPORT:
            return transport_verdict(planned.rerun, seen)


def _gloo_limit(ran: Seen) -> Signature | None:
    """Something only NCCL has (PREMUL_SUM, float8, ...), in the rerun's error or its log."""
    diagnosis = ran.diagnosis
    if diagnosis.root_cause is None:
        return None
    text = diagnosis.error.line if diagnosis.error else diagnosis.evidence or ""
    found = matches(text, None, GLOO_LIMITS) or matches(ran.files.root_tail, None, GLOO_LIMITS)
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


def _same_failure(a: Seen, b: Seen) -> bool:
    if a.outcome.status == AttemptStatus.HUNG or b.outcome.status == AttemptStatus.HUNG:
        return a.outcome.status == b.outcome.status
    return _failure_key(a.diagnosis) == _failure_key(b.diagnosis)


DDP_UNDER_DETAIL = (
    "got past the point where the job failed, as far as building its DDP model (which "
    "torch 2.13 cannot do under TORCH_DISTRIBUTED_DEBUG=DETAIL)"
)


def _ran_through(outcome: Outcome, crashed_in_ddp: bool = False) -> str:
    if crashed_in_ddp:
        return DDP_UNDER_DETAIL
    if outcome.status == AttemptStatus.SUCCEEDED:
        return f"ran to completion ({outcome.duration:.1f} s)"
    return f"got past the point where the job failed ({outcome.timebox_note})"


def _crashed_in_ddp_under_detail(job: Seen, rerun: Rerun, ran: Seen) -> bool:
    """The rerun died building a DDP model the job never reached: it got further, so it passed.

    DETAIL is only turned on for jobs that built no DDP model; one that fails before
    it does and then, on Gloo, gets past that point, meets torch 2.13's crash.
    """
    return (
        ran.outcome.status == AttemptStatus.FAILED
        and rerun.env.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL"
        and ran.files.comm.ddp
        and not job.files.comm.ddp
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
    if outcome.status == AttemptStatus.INTERRUPTED:
        return Verdict(
            kind=VerdictKind.NOT_FINISHED,
            headline="the rerun was interrupted: no verdict",
            ran=_ended(rerun, outcome),
        )
    if outcome.status == AttemptStatus.TIMEBOXED:
        return Verdict(
            kind=VerdictKind.INCONCLUSIVE,
            headline=f"the rerun neither failed nor got past the job's failure point: "
            f"{outcome.timebox_note}",
            next_steps=("give it longer: --isolate-timeout SECONDS",),
            ran=_ended(rerun, outcome),
        )
    return None


def gloo_verdict(job: Seen, rerun: Rerun, seen: Seen) -> Verdict:
    """Communication layer, program, differs, or Gloo cannot run it: the Gloo rerun's meaning."""
    outcome, diagnosis = seen.outcome, seen.diagnosis
    unfinished = _unfinished(rerun, outcome)
    if unfinished is not None:
        return unfinished
    mismatch = collective_mismatch(seen.files.ledgers)
    lag = collective_lag(seen.files.ledgers) if outcome.status == AttemptStatus.HUNG else None
    ran = _ended(rerun, outcome)
    job_signature = job.diagnosis.signature
    swapped = (
        seen.files.comm.swapped
        or job.files.comm.nccl
        or (job_signature is not None and job_signature.id.startswith("nccl"))
    )
    crashed_in_ddp = _crashed_in_ddp_under_detail(job, rerun, seen)
    if outcome.status in (AttemptStatus.SUCCEEDED, AttemptStatus.PASSED) or crashed_in_ddp:
        if swapped:
            signature = job_signature
            steps = signature.next_steps if signature else ()
            if signature is None or signature.klass != ENVIRONMENT:  # e.g. not NCCL's setup
                steps = (*steps, *NCCL_STEPS)
            return Verdict(
                kind=VerdictKind.COMM_LAYER,
                headline=f"on Gloo the same job {_ran_through(outcome, crashed_in_ddp)}: the "
                "fault is in NCCL or the network/GPU interconnect, not in your program",
                details=(f"the job: {describe_ending(job.outcome, job.diagnosis)}",),
                next_steps=tuple(dict.fromkeys(steps))[:5],
                ran=ran,
            )
        return Verdict(
            kind=VerdictKind.NOT_REPRODUCED,
            headline="run again on the same backend (it never used NCCL), the job "
            f"{_ran_through(outcome, crashed_in_ddp)}: an intermittent fault (timing, a flaky "
            "peer or network, "
            "resources), not a deterministic one in the program",
            details=(f"the job: {describe_ending(job.outcome, job.diagnosis)}",),
            next_steps=("look for what differs between runs: node, load, data order, timing",),
            ran=ran,
        )
    limit = _gloo_limit(seen) if swapped else None
    if limit is not None:
        return Verdict(
            kind=VerdictKind.GLOO_CANNOT,
            headline=f"the program uses something Gloo lacks ({limit.meaning}): this rerun "
            "cannot tell NCCL from the program",
            details=(f"the rerun: {describe_ending(outcome, diagnosis)}",),
            next_steps=limit.next_steps,
            signature=limit.id,
            ran=ran,
        )
    rerun_signature = diagnosis.signature.id if diagnosis.signature else None
    if mismatch is not None or _same_failure(job, seen):
        details = [f"the rerun: {describe_ending(outcome, diagnosis)}"]
        details[:0] = [line for line in (mismatch, lag) if line]
        steps = diagnosis.signature.next_steps if diagnosis.signature else ()
        return Verdict(
            kind=VerdictKind.PROGRAM,
            headline=_program_headline(outcome, mismatch),
            details=tuple(details),
            next_steps=steps,
            signature=rerun_signature,
            mismatch=mismatch,
            ran=ran,
        )
    return Verdict(
        kind=VerdictKind.DIFFERS,
        headline="it fails on Gloo too, but differently: both are shown",
        details=(
            f"the job:   {describe_ending(job.outcome, job.diagnosis)}",
            f"the rerun: {describe_ending(outcome, diagnosis)}",
        ),
        next_steps=diagnosis.signature.next_steps if diagnosis.signature else (),
        signature=rerun_signature,
        ran=ran,
    )


def _program_headline(outcome: Outcome, mismatch: str | None) -> str:
    if mismatch is not None:
        how = "the ranks call different collectives (seen in the Gloo rerun)"
    elif outcome.status == AttemptStatus.HUNG:
        how = "it hangs on Gloo too"
    else:
        how = "it fails the same way on Gloo"
    return f"{how}: the fault is in the program, not in the communication layer"


def single_verdict(job: Seen, rerun: Rerun, seen: Seen) -> Verdict:
    """With one rank: does the fault need several ranks, or is it in every process?"""
    outcome, diagnosis = seen.outcome, seen.diagnosis
    unfinished = _unfinished(rerun, outcome)
    if unfinished is not None:
        return unfinished
    ran = _ended(rerun, outcome)
    if outcome.status in (AttemptStatus.SUCCEEDED, AttemptStatus.PASSED):
        return Verdict(
            kind=VerdictKind.DISTRIBUTED,
            headline=f"with one rank the job {_ran_through(outcome)}: the fault needs several "
            "ranks (communication, or code that differs between ranks)",
            ran=ran,
        )
    if _same_failure(job, seen):
        return Verdict(
            kind=VerdictKind.SINGLE,
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
        kind=VerdictKind.DIFFERS,
        headline="with one rank it fails differently: both are shown",
        details=(
            f"the job:       {describe_ending(job.outcome, job.diagnosis)}",
            f"with one rank: {describe_ending(outcome, diagnosis)}",
        ),
        signature=diagnosis.signature.id if diagnosis.signature else None,
        ran=ran,
    )


def transport_verdict(rerun: Rerun, seen: Seen) -> Verdict:
    """With one NCCL transport disabled: did the failure go away?"""
    outcome, diagnosis = seen.outcome, seen.diagnosis
    unfinished = _unfinished(rerun, outcome)
    if unfinished is not None:
        return unfinished
    ran = _ended(rerun, outcome)
    variable = next(iter(rerun.env))
    about = next((what for name, _, what in NCCL_TRANSPORTS if name == variable), "")
    if outcome.status in (AttemptStatus.SUCCEEDED, AttemptStatus.PASSED):
        return Verdict(
            kind=VerdictKind.TRANSPORT,
            headline=f"the failure goes away {rerun.purpose}: {about}",
            next_steps=(
                f"run with {variable}=1 until that transport is fixed (it costs bandwidth)",
            ),
            ran=ran,
        )
    return Verdict(
        kind=VerdictKind.NO_TRANSPORT,
        headline=f"it still fails {rerun.purpose}",
        details=(f"the rerun: {describe_ending(outcome, diagnosis)}",),
        ran=ran,
    )
