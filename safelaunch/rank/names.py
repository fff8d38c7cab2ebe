"""The environment variables through which the launcher talks to the code in a rank.

Kept free of imports: the launcher reads these names without loading the rank side.
"""

HEARTBEAT_DIR = "SAFELAUNCH_HEARTBEAT_DIR"
HEARTBEAT_INTERVAL = "SAFELAUNCH_HEARTBEAT_INTERVAL"
DUMP_SIGNAL = "SAFELAUNCH_DUMP_SIGNAL"
STACKS_FILE = "SAFELAUNCH_STACKS_FILE"
COMM_FILE = "SAFELAUNCH_COMM_FILE"  # where a rank records the backend it asked for
FORCE_GLOO = "SAFELAUNCH_FORCE_GLOO"  # "1" in a Gloo isolation rerun
TIMEOUT_FACTOR = "SAFELAUNCH_TIMEOUT_FACTOR"  # stretches the user's timeouts in that rerun
FLIGHT_DIR = "SAFELAUNCH_FLIGHT_DIR"  # where the dump signal writes torch's flight record
COLLECTIVES_FILE = "SAFELAUNCH_COLLECTIVES"  # the rerun's per-rank collective ledger
CALLS_FILE = "SAFELAUNCH_CALLS"  # every run: the rank's ledger of torch.distributed calls
RERUN = "SAFELAUNCH_RERUN"  # set in every isolation rerun: its name (scripts may skip saving)
LAUNCHER_PID = "SAFELAUNCH_LAUNCHER_PID"  # the rank dies with this process
BOOTSTRAP_CODE = "from safelaunch.rank.bootstrap import main; main()"  # for `python -c`
