"""The environment variables through which the launcher talks to the code in a rank.

Kept free of imports: the launcher reads these names without loading the rank side.
"""

HEARTBEAT_DIR = "SAFELAUNCH_HEARTBEAT_DIR"
HEARTBEAT_INTERVAL = "SAFELAUNCH_HEARTBEAT_INTERVAL"
DUMP_SIGNAL = "SAFELAUNCH_DUMP_SIGNAL"
STACKS_FILE = "SAFELAUNCH_STACKS_FILE"
LAUNCHER_PID = "SAFELAUNCH_LAUNCHER_PID"  # the rank dies with this process
BOOTSTRAP_CODE = "from safelaunch.rank.bootstrap import main; main()"  # for `python -c`
