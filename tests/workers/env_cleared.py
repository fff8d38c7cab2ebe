"""Each rank starts four descendants that shed what marks them as the job's: the run's
token and every other variable (`env -i`), some also their session (setsid), one also
its parent (a double fork). Their pids go to $ESCAPEES; the rank's own to $PIDS_DIR."""

import os
import subprocess
import time

escapees = os.environ["ESCAPEES"]
record = f"echo $$ >> {escapees}/pids; exec sleep 300"
subprocess.Popen(["env", "-i", "sh", "-c", record])
subprocess.Popen(["env", "-i", "setsid", "sh", "-c", record])
subprocess.Popen(["env", "-i", "sh", "-c", record], start_new_session=True)
if os.fork() == 0:  # a daemon: fork, setsid, fork, exec with an empty environment
    os.setsid()
    if os.fork() == 0:
        os.execve("/bin/sh", ["sh", "-c", record], {})
    os._exit(0)
with open(os.path.join(os.environ["PIDS_DIR"], f"rank{os.environ['RANK']}"), "w") as out:
    out.write(f"{os.getpid()}\n")
time.sleep(300)
