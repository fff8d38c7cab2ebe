"""Stack dumps: where a rank's faulthandler writes, and where a hang's evidence is kept.

- `<private dir>/<attempt>/rank<N>.stacks`: the rank's faulthandler appends every thread's
  stack to it on the dump signal (safelaunch/rank/bootstrap.py); `safelaunch status
  --stacks` reads and truncates what it asked for.
- `<attempt>/stacks/rank<N>.txt` (a copy at the hang), `rank<N>.py-spy.txt` (py-spy's view
  with native frames, where installed) and `hang.json` (what the launcher saw when it
  declared the hang): written by hangs/stack_evidence.py, read by the hang diagnosis.
- `<attempt>/stacks/failure.json`: where the surviving ranks were when a rank failed (or
  another node stopped this one), taken before the teardown, with the same copies beside
  it: written by hangs/survivors.py (`write_failure_evidence`), read by
  `read_failure_evidence`.
- `<private dir>/<attempt>/rank<N>.stacks.<pid>`: where a process forked from rank N (a
  DataLoader worker) writes its own dump (rank/bootstrap.py re-registers faulthandler in
  the child); `<attempt>/stacks/rank<N>.child<pid>.txt` its copy.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

DIRECTORY = "stacks"  # in the attempt directory
HANG_EVIDENCE = "hang.json"
FAILURE_EVIDENCE = "failure.json"


def dump_file(private_attempt_dir: Path, rank: int | str) -> Path:
    """Where the rank's faulthandler writes (in the 0700 private directory)."""
    return private_attempt_dir / f"rank{rank}.stacks"


def directory(attempt_dir: Path) -> Path:
    return attempt_dir / DIRECTORY


def collected(target: Path, rank: int) -> Path:
    return target / f"rank{rank}.txt"


def py_spy(target: Path, rank: int) -> Path:
    return target / f"rank{rank}.py-spy.txt"


def hang_evidence(attempt_dir: Path) -> Path:
    return directory(attempt_dir) / HANG_EVIDENCE


def write_hang_evidence(attempt_dir: Path, evidence: dict[str, object]) -> None:
    """What the launcher saw, as JSON, next to the stacks; never raises."""
    import contextlib
    import json

    with contextlib.suppress(OSError):
        hang_evidence(attempt_dir).write_text(json.dumps(evidence, indent=1, default=str))


def failure_evidence(attempt_dir: Path) -> Path:
    return directory(attempt_dir) / FAILURE_EVIDENCE


def write_failure_evidence(attempt_dir: Path, evidence: dict[str, object]) -> None:
    """Where the survivors were when a rank failed, as JSON; never raises."""
    import contextlib
    import json

    with contextlib.suppress(OSError):
        directory(attempt_dir).mkdir(exist_ok=True)
        failure_evidence(attempt_dir).write_text(json.dumps(evidence, indent=1, default=str))


def read_failure_evidence(attempt_dir: Path) -> dict[str, object] | None:
    """failure.json as written; None when absent, unreadable or not an object."""
    import json

    try:
        found = json.loads(failure_evidence(attempt_dir).read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None


def forked_dump_file(rank_dump: str, pid: int) -> str:
    """Where a process forked from the rank (pid) writes its dump: beside the rank's."""
    return f"{rank_dump}.{pid}"


def collected_child(target: Path, rank: int, pid: int) -> Path:
    return target / f"rank{rank}.child{pid}.txt"
