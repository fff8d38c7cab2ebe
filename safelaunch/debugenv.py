"""Debug-environment profiles: variables safelaunch sets for the ranks unless the user did.

`{attempt}` and `{rank}` are filled in per rank. NCCL_DEBUG_FILE expands %h (host) and %p
(pid) itself but has no rank placeholder, so the rank goes into the name. Never
TORCH_DISTRIBUTED_DEBUG=DETAIL: with torch 2.13 it crashes while constructing DDP.
"""

from __future__ import annotations

from safelaunch.rundir import flight_file, rank_logs
from safelaunch.vocab import StrEnum


class DebugProfile(StrEnum):
    QUIET = "quiet"
    DEFAULT = "default"
    FULL = "full"


PROFILES: dict[DebugProfile, tuple[tuple[str, str, str], ...]] = {
    # torchrun's own defaults only
    DebugProfile.QUIET: (),
    # NCCL's detail to a file per rank (the console stays clean, nothing is lost), the
    # flight recorder sized and dumped next to the logs on a timeout
    DebugProfile.DEFAULT: (
        ("NCCL_DEBUG", "INFO", "NCCL's detail, into a file per rank"),
        ("NCCL_DEBUG_FILE", rank_logs.NCCL_LOG, "NCCL's log per rank"),
        ("TORCH_FR_BUFFER_SIZE", "2000", "flight recorder: the last 2000 collectives"),
        ("TORCH_FR_DUMP_TEMP_FILE", flight_file.TORCH_DUMP, "flight recorder dumps here"),
        ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1", "dump the flight recorder on an NCCL timeout"),
    ),
}
PROFILES[DebugProfile.FULL] = (
    *PROFILES[DebugProfile.DEFAULT],
    ("NCCL_DEBUG_SUBSYS", "ALL", "every NCCL subsystem"),
    ("TORCH_SHOW_CPP_STACKTRACES", "1", "C++ frames in torch errors"),
    ("TORCH_CPP_LOG_LEVEL", "INFO", "c10d's own log"),
    ("TORCH_DISTRIBUTED_DEBUG", "INFO", "collective checks (DETAIL crashes DDP in 2.13)"),
    ("CUDA_LAUNCH_BLOCKING", "1", "CUDA errors where they happen (slow)"),
)
