"""Records the pure-rule tests build by hand: one builder each, shared across test files.

Each takes the fields a test varies and fills the rest with values no rule reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from safelaunch.diagnose.rootcause import RankEvidence
from safelaunch.hangs.detection import RankProgress
from safelaunch.outcome import Outcome, RankEnding, RankResult
from safelaunch.rundir import report_file
from safelaunch.rundir.heartbeat_file import Beat, Frame
from safelaunch.supervisor import RankExit

NOWHERE = Path("/nonexistent")


def beat(
    rank: int = 0,
    *,
    since: float = 0.0,
    time: float | None = None,
    frames: tuple[Frame, ...] = (),
    step: int | None = None,
    seq: int | None = None,
) -> Beat:
    """A heartbeat record; `time` (the last sample) defaults to `since`."""
    return Beat(
        rank=rank,
        time=since if time is None else time,
        since=since,
        frames=frames,
        step=step,
        seq=seq,
    )


def progress(rank: int, last: float, beat: Beat | None = None) -> RankProgress:
    return RankProgress(rank=rank, last_progress=last, beat=beat, heartbeat=beat is not None)


def rank_exit(rank: int = 0, *, returncode: int = 1, ended_after: float = 1.0) -> RankExit:
    return RankExit(
        rank=rank,
        local_rank=rank,
        pid=100 + rank,
        returncode=returncode,
        ended_after=ended_after,
        log_path=NOWHERE / f"rank{rank}.log",
        error_file=NOWHERE / f"rank{rank}.error.json",
    )


def rank_result(
    rank: int = 0,
    *,
    exit_code: int | None = 1,
    signal: int | None = None,
    ended_after: float = 1.0,
    log: Path | None = None,
    state: RankEnding = RankEnding.FAILED,
) -> RankResult:
    log = log or NOWHERE / f"rank{rank}.log"
    return RankResult(
        rank=rank,
        local_rank=rank,
        pid=10 + rank,
        state=state,
        exit_code=exit_code,
        signal=signal,
        ended_after=ended_after,
        log_path=log,
        error_file=log.with_suffix(".json"),
    )


def outcome(status: str, *ranks: RankResult, attempt_dir: Path | None = None) -> Outcome:
    attempt_dir = attempt_dir or NOWHERE / "attempt_0"
    return Outcome(
        attempt=0,
        status=status,  # type: ignore[arg-type]
        ranks=ranks,
        first_failure=0 if ranks else None,
        interrupt_signal=None,
        exit_code=1,
        duration=1.0,
        strays_ended=0,
        log_problems=(),
        run_dir=attempt_dir.parent,
        attempt_dir=attempt_dir,
    )


def rank_evidence(rank: int, **fields: Any) -> RankEvidence:
    """What the root-cause rule knows of one rank (a clean end unless the test says)."""
    defaults: dict[str, Any] = {"text": "", "failed": False, "ended": 1.0, "code": None}
    defaults.update(fields)
    return RankEvidence(rank=rank, **defaults)


def read_report(attempt_dir: Path) -> dict[str, Any]:
    """An attempt's report.json; fails the test when it is missing or unreadable."""
    report = report_file.read_report(attempt_dir)
    assert report is not None, f"no readable {report_file.report(attempt_dir)}"
    return report
