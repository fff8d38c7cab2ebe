"""Every default that is a value, written once.

The command line applies and shows these (`safelaunch --help`), LaunchConfig's fields
start from them, and build_config falls back to them for an option a caller left out:
tests/test_config.py checks that the three agree. torchrun's own defaults are torchrun
2.13's (shared/reference/torchrun-2.13.md). Empty defaults ("", None, off) are not here.
"""

import signal

# torchrun's options
NNODES = (1, 1)  # MIN, MAX: one node; written "1:1" on the command line
NPROC_PER_NODE = 1
RDZV_BACKEND = "static"
MAX_RESTARTS = 0
MONITOR_INTERVAL_S = 0.1
START_METHOD = "spawn"
EVENT_LOG_HANDLER = "null"
ROLE = "default"
LOG_DIR = "safelaunch_logs"
NODE_RANK = 0
MASTER_ADDR = "localhost"  # what torchrun 2.13 gives a one-node job (measured)
SIGNALS_TO_HANDLE = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
SHUTDOWN_TIMEOUT_S = 30.0

# safelaunch's own
HANG_TIMEOUT_S = 300.0  # 0 turns hang detection off; auto's deadline until the rhythm is known
HANG_AUTO = "auto"  # --hang-timeout's default: learned from the job's rhythm (hangs/rhythm.py)
DEBUG_PROFILE = "default"  # safelaunch.debugenv.PROFILES
ISOLATE = "auto"  # auto | always | never
RESTART_POLICY = "auto"  # auto | always (torchrun's) | never: docs/restarts.md
ISOLATE_TIMEOUT_S = 600.0  # cap on each isolation rerun
COLOR = "auto"  # auto | always | never
STATUS_INTERVAL_S = 2.0  # between `safelaunch status --watch` refreshes
ON_VERDICT_TIMEOUT_S = 10.0  # then the --on-verdict command is killed (docs/on-verdict.md)
METRICS_PORT = 0  # 0: no OpenMetrics endpoint (docs/metrics.md)
METRICS_ADDR = "127.0.0.1"  # loopback: a shared machine's other users cannot scrape it

# --rdzv-conf keys, torch's defaults for the c10d rendezvous
JOIN_TIMEOUT_S = 600
KEEP_ALIVE_INTERVAL_S = 5
KEEP_ALIVE_MAX_ATTEMPT = 3
# A node is taken for lost when its launcher's beats stood still for keep_alive_interval x
# keep_alive_max_attempt (torch's rule), and never sooner than this: the others then stop
# their ranks, which torchrun never does for a late keep-alive. 16 launchers and 32 ranks
# on 2 cores starved one launcher past the 3 s of a 1 s x 3 keep-alive (bench/scale.py).
LOST_AFTER_FLOOR_S = 10.0
