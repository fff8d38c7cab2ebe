"""Stack dumps: where a rank's faulthandler writes, and where a hang's evidence is kept.

- `<private dir>/<attempt>/rank<N>.stacks`: the rank's faulthandler appends every thread's
  stack to it on the dump signal (safelaunch/rank/bootstrap.py); `safelaunch status
  --stacks` reads and truncates what it asked for.
- `<attempt>/stacks/rank<N>.txt` (a copy at the hang), `rank<N>.py-spy.txt` (py-spy's view
  with native frames, where installed) and `hang.json` (what the launcher saw when it
  declared the hang): written by hangs/stack_evidence.py, read by the hang diagnosis.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

DIRECTORY = "stacks"  # in the attempt directory
HANG_EVIDENCE = "hang.json"


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
