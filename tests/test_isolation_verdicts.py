"""The verdicts as a table: the job as seen x a rerun as seen -> what the rerun proves.

No job runs and no file is read: the verdicts take what the rank files say as
arguments (evidence.RankFiles), so each row states them outright.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from test_rerun_policy import _outcome, _rank  # rank 0 failed, its log nowhere

from safelaunch.diagnose import Diagnosis
from safelaunch.diagnose.errortext import ErrorText
from safelaunch.diagnose.signatures import SIGNATURES
from safelaunch.isolation.evidence import CommUse, RankFiles
from safelaunch.isolation.reruns import Experiment, Planned
from safelaunch.isolation.verdicts import Seen, VerdictKind, judge
from safelaunch.outcome import AttemptStatus
from safelaunch.plan import Rerun, Timebox

BOX = Timebox(past_step=None, past_seq=None, after_s=10.0, cap_s=60.0)
NCCL = CommUse(requested=("nccl",), used=("nccl",), swapped=False, initialised=True)
GLOO = CommUse(requested=("gloo",), used=("gloo",), swapped=False, initialised=True)
SWAPPED = CommUse(requested=("nccl",), used=("cuda:gloo",), swapped=True, initialised=True)
DDP_SWAPPED = CommUse(
    requested=("nccl",), used=("cuda:gloo",), swapped=True, initialised=True, ddp=True
)


def _rerun(experiment: Experiment, env: dict[str, str] | None = None) -> Planned:
    name, purpose, gloo, nproc = {
        Experiment.GLOO: ("isolate_gloo", "on Gloo", True, None),
        Experiment.SINGLE: ("isolate_single", "with one rank", False, 1),
        Experiment.TRANSPORT: ("isolate_nccl_shm", "with NCCL_SHM_DISABLE=1", False, None),
    }[experiment]
    if experiment is Experiment.TRANSPORT:
        env = {"NCCL_SHM_DISABLE": "1"}
    rerun = Rerun(name=name, purpose=purpose, gloo=gloo, nproc=nproc, env=env or {}, timebox=BOX)
    return Planned(experiment=experiment, rerun=rerun)


@dataclass(frozen=True)
class Run:
    """A row's run, short: its status, what failed, and what its files say."""

    status: str
    error: str | None = None  # the root cause's error line, "Kind: message"
    at: str | None = None  # its file:line
    signature: str | None = None
    files: RankFiles = field(default_factory=RankFiles)

    def seen(self) -> Seen:
        note = (
            "every rank is past step 3"
            if self.status in (AttemptStatus.PASSED, AttemptStatus.TIMEBOXED)
            else None
        )
        outcome = replace(_outcome(self.status, _rank()), timebox_note=note)
        failed = self.status == AttemptStatus.FAILED
        signature = next((s for s in SIGNATURES if s.id == self.signature), None)
        error = ErrorText(line=self.error, location=self.at, source="log") if self.error else None
        diagnosis = Diagnosis(
            root_cause=_rank() if failed else None,
            error=error,
            signature=signature,
            klass=signature.klass if signature else ("unknown" if failed else None),
        )
        return Seen(outcome=outcome, diagnosis=diagnosis, files=self.files)


def _ledgers(*per_rank: tuple[str, ...]) -> RankFiles:
    ledgers = {
        rank: {n: (op, what) for n, (op, what) in enumerate((c.split(":") for c in calls), 1)}
        for rank, calls in enumerate(per_rank)
    }
    return RankFiles(comm=SWAPPED, ledgers=ledgers)


BAD_VALUE = Run(AttemptStatus.FAILED, "ValueError: bad", "train.py:9")
NCCL_JOB = Run(
    AttemptStatus.FAILED, "RuntimeError: NCCL error", "train.py:5", files=RankFiles(comm=NCCL)
)
GLOO_JOB = Run(
    AttemptStatus.FAILED, "RuntimeError: peer closed", "train.py:5", files=RankFiles(comm=GLOO)
)
SAME_AS_NCCL_JOB = Run(AttemptStatus.FAILED, "RuntimeError: other text", "train.py:5")
PREMUL = "RuntimeError: Cannot use ReduceOp.PREMUL_SUM with Gloo"
DETAIL = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
HANG_JOB = Run(AttemptStatus.HUNG, files=RankFiles(comm=NCCL))

ROWS = [
    # (id, experiment, rerun env, job, rerun, verdict)
    (
        "gloo passes, job on NCCL",
        Experiment.GLOO,
        None,
        NCCL_JOB,
        Run(AttemptStatus.SUCCEEDED),
        VerdictKind.COMM_LAYER,
    ),
    (
        "gloo past the point",
        Experiment.GLOO,
        None,
        NCCL_JOB,
        Run(AttemptStatus.PASSED),
        VerdictKind.COMM_LAYER,
    ),
    (
        "gloo passes, job on gloo",
        Experiment.GLOO,
        None,
        GLOO_JOB,
        Run(AttemptStatus.PASSED),
        VerdictKind.NOT_REPRODUCED,
    ),
    (
        "gloo passes, job's signature is NCCL's",
        Experiment.GLOO,
        None,
        Run(AttemptStatus.FAILED, signature="nccl-system-error", files=RankFiles(comm=GLOO)),
        Run(AttemptStatus.SUCCEEDED),
        VerdictKind.COMM_LAYER,
    ),
    (
        "gloo dies building DDP under DETAIL: got further",
        Experiment.GLOO,
        DETAIL,
        NCCL_JOB,
        Run(
            AttemptStatus.FAILED,
            "Fatal Python error: Segmentation fault",
            files=RankFiles(comm=DDP_SWAPPED),
        ),
        VerdictKind.COMM_LAYER,
    ),
    (
        "a DDP crash without DETAIL is a failure",
        Experiment.GLOO,
        None,
        NCCL_JOB,
        Run(
            AttemptStatus.FAILED,
            "Fatal Python error: Segmentation fault",
            files=RankFiles(comm=DDP_SWAPPED),
        ),
        VerdictKind.DIFFERS,
    ),
    (
        "gloo lacks the op (its error)",
        Experiment.GLOO,
        None,
        NCCL_JOB,
        Run(AttemptStatus.FAILED, PREMUL, "train.py:7", files=RankFiles(comm=SWAPPED)),
        VerdictKind.GLOO_CANNOT,
    ),
    (
        "gloo lacks the op (its log's end)",
        Experiment.GLOO,
        None,
        NCCL_JOB,
        Run(
            AttemptStatus.FAILED,
            "RuntimeError: x",
            "t.py:1",
            files=RankFiles(comm=SWAPPED, root_tail=PREMUL),
        ),
        VerdictKind.GLOO_CANNOT,
    ),
    (
        "gloo fails the same way",
        Experiment.GLOO,
        None,
        NCCL_JOB,
        SAME_AS_NCCL_JOB,
        VerdictKind.PROGRAM,
    ),
    (
        "gloo hangs as the job hung",
        Experiment.GLOO,
        None,
        HANG_JOB,
        Run(AttemptStatus.HUNG),
        VerdictKind.PROGRAM,
    ),
    (
        "gloo fails otherwise, ledgers differ",
        Experiment.GLOO,
        None,
        NCCL_JOB,
        Run(
            AttemptStatus.FAILED,
            "RuntimeError: y",
            "t.py:2",
            files=_ledgers(("all_reduce:float32[4]",), ("barrier:",)),
        ),
        VerdictKind.PROGRAM,
    ),
    ("gloo fails otherwise", Experiment.GLOO, None, NCCL_JOB, BAD_VALUE, VerdictKind.DIFFERS),
    (
        "gloo interrupted",
        Experiment.GLOO,
        None,
        NCCL_JOB,
        Run(AttemptStatus.INTERRUPTED),
        VerdictKind.NOT_FINISHED,
    ),
    (
        "gloo at its cap",
        Experiment.GLOO,
        None,
        NCCL_JOB,
        Run(AttemptStatus.TIMEBOXED),
        VerdictKind.INCONCLUSIVE,
    ),
    (
        "one rank passes",
        Experiment.SINGLE,
        None,
        NCCL_JOB,
        Run(AttemptStatus.SUCCEEDED),
        VerdictKind.DISTRIBUTED,
    ),
    (
        "one rank, same failure",
        Experiment.SINGLE,
        None,
        NCCL_JOB,
        SAME_AS_NCCL_JOB,
        VerdictKind.SINGLE,
    ),
    ("one rank, other failure", Experiment.SINGLE, None, NCCL_JOB, BAD_VALUE, VerdictKind.DIFFERS),
    (
        "one rank at its cap",
        Experiment.SINGLE,
        None,
        NCCL_JOB,
        Run(AttemptStatus.TIMEBOXED),
        VerdictKind.INCONCLUSIVE,
    ),
    (
        "transport off passes",
        Experiment.TRANSPORT,
        None,
        NCCL_JOB,
        Run(AttemptStatus.PASSED),
        VerdictKind.TRANSPORT,
    ),
    (
        "transport off fails",
        Experiment.TRANSPORT,
        None,
        NCCL_JOB,
        BAD_VALUE,
        VerdictKind.NO_TRANSPORT,
    ),
    (
        "transport off interrupted",
        Experiment.TRANSPORT,
        None,
        NCCL_JOB,
        Run(AttemptStatus.INTERRUPTED),
        VerdictKind.NOT_FINISHED,
    ),
]


@pytest.mark.parametrize(
    ("experiment", "env", "job", "rerun", "kind"),
    [row[1:] for row in ROWS],
    ids=[row[0] for row in ROWS],
)
def test_verdict_table(
    experiment: Experiment, env: dict[str, str] | None, job: Run, rerun: Run, kind: VerdictKind
) -> None:
    planned = _rerun(experiment, env)
    verdict = judge(planned, job.seen(), rerun.seen())
    assert verdict.kind is kind
    assert verdict.ran.name == planned.rerun.name and verdict.ran.status == rerun.status
    assert verdict.headline and "\n" not in verdict.headline


def test_the_table_reaches_every_verdict() -> None:
    assert {row[-1] for row in ROWS} == set(VerdictKind)


def test_verdict_words_are_report_jsons() -> None:
    """report.json's `verdict` strings (docs/report-json.md): the enum keeps them."""
    assert [k.value for k in VerdictKind] == [
        "communication layer",
        "program",
        "differs",
        "gloo cannot run this program",
        "did not reproduce",
        "inconclusive",
        "interrupted",
        "distributed fault",
        "single-process fault",
        "transport",
        "no transport",
    ]


def test_what_the_verdicts_name() -> None:
    gloo = _rerun(Experiment.GLOO)
    limit = judge(
        gloo,
        NCCL_JOB.seen(),
        Run(AttemptStatus.FAILED, PREMUL, files=RankFiles(comm=SWAPPED)).seen(),
    )
    assert limit.signature == "gloo-premul-sum"
    mismatched = Run(
        AttemptStatus.FAILED, "E: y", files=_ledgers(("all_reduce:float32[4]",), ("barrier:",))
    )
    program = judge(gloo, NCCL_JOB.seen(), mismatched.seen())
    assert program.mismatch == (
        "collective #1 differs: rank 0 called all_reduce(float32[4]); rank 1 called barrier()"
    )
    behind = RankFiles(ledgers={0: {1: ("barrier", "")}, 1: {}})
    hang = judge(gloo, HANG_JOB.seen(), Run(AttemptStatus.HUNG, files=behind).seen())
    assert "collectives called from Python: rank 1 called 0; rank 0 called 1" in hang.details
    transport = judge(
        _rerun(Experiment.TRANSPORT), NCCL_JOB.seen(), Run(AttemptStatus.PASSED).seen()
    )
    assert transport.headline.endswith(
        "shared memory between processes: /dev/shm size, IPC namespace"
    )
    assert transport.next_steps == (
        "run with NCCL_SHM_DISABLE=1 until that transport is fixed (it costs bandwidth)",
    )
