"""The attempt's logs: `<attempt>/rank<N>.log`, `rank<N>.error.json`, `launcher.log`, ...

- `rank<N>.log`: every byte the rank wrote, stdout and stderr in the order written
  (supervisor/tee.py); read by the diagnosis and explain.
- `rank<N>.error.json`: torchelastic's error file (TORCHELASTIC_ERROR_FILE), written by
  torch's @record in the user's script; read by diagnose/errortext.py.
- `launcher.log`: safelaunch's own messages, written before the console gets them.
- `filtered_stdout.log` / `filtered_stderr.log`: lines --duplicate-*-filters held back.
- `nccl-rank<N>.<host>.<pid>.log`: NCCL's own log under --debug-profile default.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

LOG_PREFIX = "rank"
LOG_SUFFIX = ".log"
LAUNCHER_LOG = "launcher.log"
# NCCL expands %h (host) and %p (pid) itself but has no rank placeholder
NCCL_LOG = "{attempt}/nccl-rank{rank}.%h.%p.log"


def log(attempt_dir: Path, rank: int) -> Path:
    return attempt_dir / f"{LOG_PREFIX}{rank}{LOG_SUFFIX}"


def log_pattern(attempt_dir: Path, first: int, last: int) -> str:
    """`<attempt>/rank{0..3}.log`, as the banner shows the rank logs."""
    if first == last:
        return f"{attempt_dir}/{LOG_PREFIX}{first}{LOG_SUFFIX}"
    return f"{attempt_dir}/{LOG_PREFIX}{{{first}..{last}}}{LOG_SUFFIX}"


def error_file(attempt_dir: Path, rank: int) -> Path:
    return attempt_dir / f"rank{rank}.error.json"


def launcher_log(attempt_dir: Path) -> Path:
    return attempt_dir / LAUNCHER_LOG


def filtered_log(attempt_dir: Path, stream: int) -> Path:
    """Stream 1 is stdout, 2 stderr."""
    return attempt_dir / ("filtered_stdout.log" if stream == 1 else "filtered_stderr.log")
