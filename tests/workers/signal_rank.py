"""A rank that says which signals it receives (no torch: cheap to start on many "nodes").

SIGTERM, SIGINT: prints, "writes a checkpoint" for SAVE_S seconds, prints `saved`, then
dies of the signal as an unhandled one would. SIGUSR1/SIGUSR2: prints and goes on. The rank ends by
itself after RUN_S seconds (exit 0), or raises once ready when FAIL_RANK is its rank.
$PIDS_DIR/ready-<RANK> holds its pid once the handlers are in place.
"""

import os
import signal
import sys
import time

rank = os.environ["RANK"]
where = f"rank {rank} on {os.environ.get('SLURMD_NODENAME', 'here')}"
received: list[str] = []


def on_term(signum: int, frame: object) -> None:
    print(f"{where} got {signal.Signals(signum).name}", flush=True)
    time.sleep(float(os.environ.get("SAVE_S", "1")))
    print(f"{where} saved", flush=True)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def on_user(signum: int, frame: object) -> None:
    received.append(signal.Signals(signum).name)
    print(f"{where} got {signal.Signals(signum).name}", flush=True)


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)
signal.signal(signal.SIGUSR1, on_user)
signal.signal(signal.SIGUSR2, on_user)
# Written aside and renamed: the test reads the pid as soon as the name appears.
ready = os.path.join(os.environ["PIDS_DIR"], f"ready-{rank}")
pending = os.path.join(os.environ["PIDS_DIR"], f".pending-{rank}")  # not matched by ready-*
with open(pending, "w") as out:
    out.write(f"{os.getpid()}\n")
os.replace(pending, ready)
print(f"{where} ready", flush=True)
if os.environ.get("FAIL_RANK") == rank:
    time.sleep(float(os.environ.get("FAIL_AFTER_S", "0")))
    raise RuntimeError(f"rank {rank} broke on purpose")
end = time.monotonic() + float(os.environ.get("RUN_S", "120"))
while time.monotonic() < end:
    time.sleep(0.05)
print(f"{where} done, received: {','.join(received) or 'nothing'}", flush=True)
sys.exit(0)
