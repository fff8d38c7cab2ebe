"""Capture real failure logs as signature fixtures (tests/fixtures/logs/<id>.log).

    .venv/bin/python scripts/capture_fixtures.py [ID ...]

Each scenario runs for real on CPU (torch + Gloo): one process, or several ranks started
by a minimal runner that leaves survivors alone, so they print what a peer's death does
to them. The chosen rank's output (stdout and stderr) becomes the fixture. GPU-only
signatures cannot be reproduced here and keep their transcribed texts.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "logs"
PRELUDE = (
    "import os, sys, time, socket\nfrom datetime import timedelta\n"
    "import torch\nimport torch.distributed as dist\n"
)
INIT = "dist.init_process_group('gloo', timeout=timedelta(seconds=3))\nrank = dist.get_rank()\n"

# id -> (world size, rank whose log is the fixture, code)
SCENARIOS: dict[str, tuple[int, int, str]] = {
    "nccl-not-built": (1, 0, "dist.init_process_group('nccl')"),
    "pg-not-initialized": (1, 0, "dist.all_reduce(torch.ones(1))"),
    "torch-without-cuda": (1, 0, "torch.ones(1).cuda()"),
    "port-in-use": (
        1,
        0,
        (
            "busy = socket.socket(); busy.bind(('', 0)); busy.listen()\n"
            "dist.TCPStore('127.0.0.1', busy.getsockname()[1], is_master=True,"
            " timeout=timedelta(seconds=2))"
        ),
    ),
    "store-unreachable": (
        1,
        0,
        (
            "free = socket.socket(); free.bind(('', 0))\n"
            "port = free.getsockname()[1]; free.close()\n"
            "dist.TCPStore('127.0.0.1', port, is_master=False, timeout=timedelta(seconds=2))"
        ),
    ),
    "name-resolution": (
        1,
        0,
        (
            "dist.TCPStore('no-such-host.invalid', 29574, is_master=False,"
            " timeout=timedelta(seconds=2))"
        ),
    ),
    "store-clients-missing": (
        1,
        0,
        (
            "dist.TCPStore('127.0.0.1', 0, world_size=2, is_master=True,"
            " timeout=timedelta(seconds=2), wait_for_workers=True)"
        ),
    ),
    "peer-connection-closed": (
        3,
        0,
        INIT
        + (
            "for step in range(1000):\n"
            "    if rank == 1 and step == 5:\n"
            "        os._exit(3)\n"
            "    dist.all_reduce(torch.ones(1 << 16))\n"
        ),
    ),
    "store-connection-lost": (
        2,
        1,
        (
            "store = dist.TCPStore('127.0.0.1', int(os.environ['MASTER_PORT']), 2,"
            " os.environ['RANK'] == '0', timedelta(seconds=10))\n"
            "if os.environ['RANK'] == '0':\n"
            "    time.sleep(1); os._exit(0)\n"
            "store.get('never-set')"
        ),
    ),
    # rank 1 receives 8 bytes where it expects 4 and aborts (rank 0 even survives)
    "collective-mismatch": (
        2,
        1,
        INIT
        + ("dist.all_reduce(torch.ones(1, dtype=torch.float64 if rank == 0 else torch.float32))"),
    ),
    "collective-timeout": (
        2,
        0,
        INIT
        + ("dist.all_reduce(torch.ones(4)) if rank == 0 else dist.broadcast(torch.ones(4), src=1)"),
    ),
    "sampler-and-shuffle": (
        1,
        0,
        (
            "from torch.utils.data import DataLoader, RandomSampler, TensorDataset\n"
            "data = TensorDataset(torch.arange(8.0))\n"
            "DataLoader(data, sampler=RandomSampler(data), shuffle=True)"
        ),
    ),
    "ddp-unused-parameters": (
        2,
        0,
        INIT
        + (
            "from torch import nn\n"
            "class TwoHeads(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.used, self.unused = nn.Linear(4, 1), nn.Linear(4, 1)\n"
            "    def forward(self, x):\n"
            "        return self.used(x)\n"
            "model = nn.parallel.DistributedDataParallel(TwoHeads())\n"
            "for _ in range(3):\n"
            "    model(torch.randn(2, 4)).sum().backward()"
        ),
    ),
    "ddp-model-mismatch": (
        2,
        0,
        INIT
        + (
            "from torch import nn\n"
            "layers = [nn.Linear(4, 4) for _ in range(1 if rank == 0 else 2)]\n"
            "nn.parallel.DistributedDataParallel(nn.Sequential(*layers))"
        ),
    ),
    "non-finite-values": (
        1,
        0,
        (
            "x = torch.tensor([-1.0], requires_grad=True)\n"
            "with torch.autograd.detect_anomaly():\n"
            "    torch.sqrt(x).backward()"
        ),
    ),
    "host-out-of-memory": (1, 0, "torch.empty(1 << 50, dtype=torch.uint8)"),
}


# Reproduced under an 8 MiB /dev/shm in a private mount namespace (needs root).
SMALL_SHM = {
    "shm-too-small": (
        "from torch.utils.data import DataLoader, Dataset\n"
        "class Big(Dataset):\n"
        "    def __len__(self):\n"
        "        return 64\n"
        "    def __getitem__(self, i):\n"
        "        return torch.ones(4 << 20)  # 16 MiB a sample, handed over through /dev/shm\n"
        "for batch in DataLoader(Big(), batch_size=4, num_workers=2):\n"
        "    pass"
    ),
}


def run_with_small_shm(code: str) -> bytes:
    """`code` in one process whose /dev/shm is 8 MiB (unshare -m; root only)."""
    with tempfile.TemporaryDirectory() as work:
        script = Path(work) / "scenario.py"
        script.write_text(PRELUDE + code + "\n")
        shell = f"mount -t tmpfs -o size=8m tmpfs /dev/shm && exec {sys.executable} {script}"
        return subprocess.run(
            ["unshare", "-m", "sh", "-c", shell],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=120,
        ).stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def run_scenario(code: str, world: int, timeout: float = 60) -> list[bytes]:
    """Run `code` as `world` ranks; every rank's combined output."""
    with tempfile.TemporaryDirectory() as work:
        script = Path(work) / "scenario.py"
        script.write_text(PRELUDE + code + "\n")
        port = str(_free_port())
        procs = []
        for rank in range(world):
            env = {
                **os.environ,
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "PYTHONUNBUFFERED": "1",
            }
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(script)],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
            )
        outputs = []
        for proc in procs:
            try:
                outputs.append(proc.communicate(timeout=timeout)[0])
            except subprocess.TimeoutExpired:
                proc.kill()
                outputs.append(proc.communicate()[0])
        return outputs


def main() -> None:
    wanted = sys.argv[1:] or [*SCENARIOS, *SMALL_SHM]
    for name in wanted:
        if name in SMALL_SHM:
            output, world, rank = run_with_small_shm(SMALL_SHM[name]), 1, 0
        else:
            world, rank, code = SCENARIOS[name]
            output = run_scenario(code, world)[rank]
        (FIXTURES / f"{name}.log").write_bytes(output)
        print(f"{name}: {len(output.splitlines())} lines from rank {rank} of {world}")


if __name__ == "__main__":
    main()
