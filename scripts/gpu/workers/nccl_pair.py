"""Two NCCL ranks on one GPU; MODE (the first argument) picks what goes wrong.

duplicate: plain NCCL. NCCL refuses two ranks on one GPU of one host ("Duplicate GPU
           detected"); on Gloo (safelaunch's rerun, cuda:gloo) the same job passes.
spin:      rank 1 spins in a CUDA kernel and waits for it; rank 0 waits in all_reduce.
sleep:     rank 1 sleeps in load_next_batch; rank 0 waits in all_reduce (a hang inside
           an NCCL collective; on Gloo it hangs the same way).
timeout:   as sleep, with a 6 s NCCL timeout: torch's watchdog aborts rank 0 and dumps
           the flight recorder.

Except in `duplicate`, each rank gets its own NCCL_HOSTID: NCCL then takes the two ranks
for two hosts and connects them over sockets on loopback, which is what lets one GPU
carry a real two-rank NCCL job (NCCL refuses it otherwise). The socket transport is forced
(NCCL_NET=Socket, NCCL_IB_DISABLE=1) unless set.
"""

import json
import os
import sys
import time
from datetime import timedelta

MODE = sys.argv[1]
RANK = int(os.environ["RANK"])
if MODE != "duplicate":
    os.environ["NCCL_HOSTID"] = f"safelaunch-acceptance-{RANK}"  # before NCCL reads it
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_IB_DISABLE", "1")
    os.environ.setdefault("NCCL_NET", "Socket")  # not a network plugin the image may carry

import torch  # noqa: E402 - NCCL's variables first
import torch.distributed as dist  # noqa: E402

SPIN_CYCLES = 240 * 2_000_000_000  # ~2 minutes of GPU clock: longer than the check


def record(**fields):
    print("ACCEPTANCE " + json.dumps(fields), flush=True)


def spin_on_gpu():
    torch.cuda._sleep(SPIN_CYCLES)  # a kernel that spins on the GPU's clock
    torch.cuda.synchronize()  # and the CPU spins waiting for it


def load_next_batch():
    time.sleep(600)


def wait_for_peer(tensor):
    dist.all_reduce(tensor)
    return tensor.item()  # blocks until the collective completes: never


def main():
    torch.cuda.set_device(0)
    seconds = 6 if MODE == "timeout" else 600
    # device_id: NCCL's communicator is built inside init_process_group, where safelaunch's
    # hang rule allows 60 s (the rendezvous), not in the first collective under the short
    # --hang-timeout. `duplicate` keeps torch's lazy init: it fails in its first all_reduce.
    device = None if MODE == "duplicate" else torch.device("cuda", 0)
    dist.init_process_group("nccl", timeout=timedelta(seconds=seconds), device_id=device)
    tensor = torch.ones(1024, device="cuda")
    if MODE == "duplicate":
        for _ in range(5):
            dist.all_reduce(tensor)
        torch.cuda.synchronize()
        record(rank=RANK, backend=dist.get_backend(), ok=True)
        dist.destroy_process_group()
        return
    dist.all_reduce(tensor)
    torch.cuda.synchronize()
    record(rank=RANK, backend=dist.get_backend(), warm=True)
    if RANK == 1:
        spin_on_gpu() if MODE == "spin" else load_next_batch()
    else:
        wait_for_peer(tensor)
    dist.destroy_process_group()


main()
