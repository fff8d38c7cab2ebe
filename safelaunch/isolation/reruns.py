"""The rerun specs: which reruns follow a failed job, what each changes, and how far it runs.

Pure: the driver (driver.py) reads the job's files, asks here what to rerun, and runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from safelaunch.isolation.evidence import CommUse
from safelaunch.isolation.policy import Backend, Decision
from safelaunch.plan import Rerun, Timebox
from safelaunch.rundir.heartbeat_file import Beat
from safelaunch.vocab import StrEnum

TIME_FACTOR = 3.0  # with no step or collective count known: rerun this many times as long
MIN_RUN = 10.0  # ... and at least this long
# Transports to disable one at a time, and what each one is.
NCCL_TRANSPORTS = (
    ("NCCL_P2P_DISABLE", "p2p", "GPU peer-to-peer (NVLink/PCIe): ACS/IOMMU, nvidia-smi topo -m"),
    ("NCCL_SHM_DISABLE", "shm", "shared memory between processes: /dev/shm size, IPC namespace"),
    ("NCCL_IB_DISABLE", "ib", "InfiniBand/RoCE: HCA state (ibstat), NCCL_IB_HCA, GID index"),
)


class Experiment(StrEnum):
    """What a rerun changes; each has its own verdict (verdicts.judge)."""

    GLOO = "gloo"  # NCCL swapped for Gloo in every rank
    SINGLE = "single"  # one rank
    TRANSPORT = "transport"  # one NCCL transport disabled (NCCL_TRANSPORTS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Planned:
    """One rerun to run: what it tests, and its plan's changes."""

    experiment: Experiment
    rerun: Rerun


@dataclass(frozen=True, slots=True, kw_only=True)
class RerunSet:
    """The reruns after a failed job, in order, and notes for its report."""

    planned: tuple[Planned, ...]
    notes: tuple[str, ...]  # which collective checks the Gloo rerun has; transports not varied


def plan_reruns(
    decision: Decision,
    timebox: Timebox,
    job: CommUse,
    environ: Mapping[str, str],
    *,
    single: bool,
    transports: bool,
    nproc: int,
) -> RerunSet:
    """The Gloo rerun when the policy says so; with one rank and per transport on request."""
    planned: list[Planned] = []
    notes: list[str] = []
    if decision.run:
        rerun, checks = gloo_rerun(timebox, job, environ)
        planned.append(Planned(experiment=Experiment.GLOO, rerun=rerun))
        notes.append(checks)
    if single and nproc > 1:
        planned.append(Planned(experiment=Experiment.SINGLE, rerun=single_rerun(timebox)))
    if transports:
        reruns, skipped = transport_reruns(timebox, environ)
        planned.extend(Planned(experiment=Experiment.TRANSPORT, rerun=r) for r in reruns)
        notes.extend(skipped)
    return RerunSet(planned=tuple(planned), notes=tuple(notes))


def detail_safe(job: CommUse, environ: Mapping[str, str]) -> bool:
    """The Gloo rerun may get TORCH_DISTRIBUTED_DEBUG=DETAIL: see gloo_rerun."""
    return job.initialised and not job.ddp and "TORCH_DISTRIBUTED_DEBUG" not in environ


def failure_point(beats: Sequence[Beat | None], duration: float, cap: float) -> Timebox:
    """How far the failed attempt got: its ranks' last step or collective count, or its time."""
    steps = [b.step for b in beats if b is not None and b.step is not None]
    seqs = [b.seq for b in beats if b is not None and b.seq is not None]
    if steps:
        return Timebox(past_step=max(steps), past_seq=None, after_s=None, cap_s=cap)
    if seqs and max(seqs) > 0:
        return Timebox(past_step=None, past_seq=max(seqs), after_s=None, cap_s=cap)
    after = max(MIN_RUN, duration * TIME_FACTOR)
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
        again = "again with your TORCH_DISTRIBUTED_DEBUG"
    elif detail_safe(job, environ):
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        checks = (
            "collective checks: TORCH_DISTRIBUTED_DEBUG=DETAIL in the Gloo rerun (the job "
            "built no DDP model), and safelaunch's record of each rank's collectives"
        )
        again = "with TORCH_DISTRIBUTED_DEBUG=DETAIL to name the collective that differs"
    else:
        off = "the job built a DDP model" if job.ddp else "the job never got that far"
        checks = (
            f"collective checks: safelaunch's record of each rank's collectives (no "
            f"TORCH_DISTRIBUTED_DEBUG=DETAIL: {off}, and DETAIL crashes DDP in torch 2.13)"
        )
        again = "again, as asked"
    rerun = Rerun(
        name="isolate_gloo", purpose="on Gloo", gloo=True, nproc=None, env=env, timebox=timebox
    )
    if job.backend is Backend.GLOO:  # the backend is no question: say what the rerun is for
        rerun = replace(rerun, why=f"{again} (the job used Gloo already)")
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


def until(box: Timebox) -> str:
    """When a rerun stops, in words (said as it starts)."""
    if box.past_step is not None:
        point = f"it stops once every rank is past step {box.past_step}"
    elif box.past_seq is not None:
        point = f"it stops once every rank is past collective #{box.past_seq}"
    else:
        point = f"it stops after {box.after_s:g} s without failing"
    return f"{point} (at most {box.cap_s:g} s)"
