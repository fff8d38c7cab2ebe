"""The GPU inventory: what the driver reports, behind one small interface.

`read_inventory()` asks NVML (nvidia-ml-py) on a machine with an NVIDIA driver; where
SAFELAUNCH_GPU_INVENTORY names a JSON file it returns that recorded inventory instead.
That file is the only seam through which tests fake GPUs.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RECORDED_VAR = "SAFELAUNCH_GPU_INVENTORY"
DRIVER_MARKER = Path("/proc/driver/nvidia/version")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuProcess:
    """A compute process on a GPU."""

    pid: int
    memory_mib: int
    user: str = "?"
    command: str = "?"


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    """One physical GPU (or a MIG instance of one, with its own MIG-... UUID)."""

    index: int
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int
    mig: tuple[str, ...] = ()  # UUIDs of its MIG instances
    processes: tuple[GpuProcess, ...] = ()

    @property
    def memory_free_mib(self) -> int:
        """Memory not in use."""
        return self.memory_total_mib - self.memory_used_mib


@dataclass(frozen=True, slots=True, kw_only=True)
class Inventory:
    """What the driver says; `problem` explains an empty inventory."""

    gpus: tuple[Gpu, ...] = ()
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports, e.g. "12.8"
    problem: str | None = None
    source: str = "nvml"


def from_json(data: Mapping[str, Any], source: str) -> Inventory:
    """A recorded inventory (the shape `to_json` writes)."""
    gpus = tuple(
        Gpu(
            index=int(g["index"]),
            uuid=str(g["uuid"]),
            name=str(g["name"]),
            memory_total_mib=int(g["memory_total_mib"]),
            memory_used_mib=int(g["memory_used_mib"]),
            mig=tuple(g.get("mig", ())),
            processes=tuple(GpuProcess(**p) for p in g.get("processes", ())),
        )
        for g in data.get("gpus", ())
    )
    return Inventory(
        gpus=gpus,
        driver_version=data.get("driver_version"),
        cuda_driver_version=data.get("cuda_driver_version"),
        problem=data.get("problem"),
        source=source,
    )


def to_json(inventory: Inventory) -> dict[str, Any]:
    """The inventory as JSON data (what a recorded inventory file holds)."""
    return asdict(inventory)


def _process(pynvml: Any, entry: Any) -> GpuProcess:
    user = command = "?"
    with contextlib.suppress(OSError, ValueError):
        command = Path(f"/proc/{entry.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        command = command.strip()[:80] or "?"
        uid = os.stat(f"/proc/{entry.pid}").st_uid
        import pwd

        user = pwd.getpwuid(uid).pw_name
    memory = (entry.usedGpuMemory or 0) // (1 << 20)
    return GpuProcess(pid=int(entry.pid), memory_mib=int(memory), user=user, command=command)


def _nvml() -> Inventory:
    if not DRIVER_MARKER.exists():
        return Inventory(problem="no NVIDIA driver on this machine (no /proc/driver/nvidia)")
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses, a missing libnvidia-ml.so
        return Inventory(problem=f"NVML unavailable: {exc}")
    try:
        version = pynvml.nvmlSystemGetCudaDriverVersion()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            mig: list[str] = []
            with contextlib.suppress(Exception):
                for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                    with contextlib.suppress(Exception):
                        child = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                        mig.append(str(pynvml.nvmlDeviceGetUUID(child)))
            processes: list[Any] = []
            with contextlib.suppress(Exception):
                processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            gpus.append(
                Gpu(
                    index=index,
                    uuid=str(pynvml.nvmlDeviceGetUUID(handle)),
                    name=str(pynvml.nvmlDeviceGetName(handle)),
                    memory_total_mib=int(memory.total) >> 20,
                    memory_used_mib=int(memory.used) >> 20,
                    mig=tuple(mig),
                    processes=tuple(_process(pynvml, p) for p in processes),
                )
            )
        return Inventory(
            gpus=tuple(gpus),
            driver_version=str(pynvml.nvmlSystemGetDriverVersion()),
            cuda_driver_version=f"{version // 1000}.{version % 1000 // 10}",
        )
    except Exception as exc:
        return Inventory(problem=f"NVML failed while listing GPUs: {exc}")
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def read_inventory(environ: Mapping[str, str]) -> Inventory:
    """The recorded inventory named by SAFELAUNCH_GPU_INVENTORY, else NVML's."""
    recorded = environ.get(RECORDED_VAR)
    if recorded:
        try:
            return from_json(json.loads(Path(recorded).read_text()), f"recorded: {recorded}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return Inventory(problem=f"cannot read {RECORDED_VAR}={recorded}: {exc}")
    return _nvml()
