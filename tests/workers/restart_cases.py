"""Failures for the restart policy, chosen by CASE; the attempt is TORCHELASTIC_RESTART_COUNT.

import: a module that is not installed (deterministic). kill: rank 1 SIGKILLs itself, as
the OOM killer would (transient), until SLURM requeued the job. step: steps 0-2 reported
with safelaunch.heartbeat, then rank (attempt mod world size) raises at step 2: it fails
at the same step every attempt.
moving: fails one step further each attempt, succeeds at attempt 2 (progress).
"""

import os
import signal
import sys
import time

import safelaunch

case = os.environ["CASE"]
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
print(f"attempt {attempt}", flush=True)
if case == "import":
    import not_installed_anywhere  # noqa: F401
# under SLURM: only until the job was requeued (SLURM_RESTART_COUNT counts requeues)
if case == "kill" and rank == 1 and not int(os.environ.get("SLURM_RESTART_COUNT", "0")):
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGKILL)
if case in ("step", "moving"):
    fail_at = 2 if case == "step" else attempt + 1
    for step in range(3):
        safelaunch.heartbeat(step=step)
        if step == fail_at and rank == attempt % world and (case == "step" or attempt < 2):
            raise ValueError(f"failed at step {step}")
        time.sleep(0.1)
    if rank != attempt % world:
        time.sleep(5)  # stopped by safelaunch once the failing rank has failed
sys.exit(0)
