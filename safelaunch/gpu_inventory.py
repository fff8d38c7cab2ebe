"""The GPU inventory: what the driver reports, behind one small interface.

`read_inventory()` asks NVML (nvidia-ml-py) on a machine with an NVIDIA driver; where
SAFELAUNCH_GPU_INVENTORY names a JSON file it returns that recorded inventory instead.
That file is the only seam through which tests fake GPUs.

Its own module, outside preflight/: `safelaunch status` reads the GPUs' processes too, and
importing the preflight package would load most of the launch with it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from safelaunch.errors import PreflightError
from safelaunch.userfiles import load_json

RECORDED_VAR = "SAFELAUNCH_GPU_INVENTORY"
DRIVER_MARKER = Path("/proc/driver/nvidia/version")
NO_DRIVER = "no NVIDIA driver on this machine (no /proc/driver/nvidia)"  # so: no GPU


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


def _int(record: Mapping[str, Any], key: str, high: int = 1 << 40) -> int:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise ValueError(f"{key} must be an integer from 0 to {high}, not {value!r}")
    return value


def _str(record: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = record.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, not {value!r}")
    return value


def _records(value: Any, what: str) -> list[Mapping[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ValueError(f"{what} must be a list of objects")
    return value


def from_json(data: Any, source: str) -> Inventory:
    """A recorded inventory (the shape `to_json` writes); ValueError says what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("the file must hold a JSON object")
    gpus = tuple(
        Gpu(
            index=_int(g, "index", 1023),
            uuid=_str(g, "uuid"),
            name=_str(g, "name"),
            memory_total_mib=_int(g, "memory_total_mib"),
            memory_used_mib=_int(g, "memory_used_mib"),
            mig=tuple(_str({"mig": m}, "mig") for m in _list(g.get("mig", []), "mig")),
            processes=tuple(
                GpuProcess(
                    pid=_int(p, "pid", 1 << 22),
                    memory_mib=_int(p, "memory_mib"),
                    user=_str(p, "user", "?"),
                    command=_str(p, "command", "?"),
                )
                for p in _records(g.get("processes", []), "processes")
            ),
        )
        for g in _records(data.get("gpus", []), "gpus")
    )
    optional = {k: data.get(k) for k in ("driver_version", "cuda_driver_version", "problem")}
    for key, value in optional.items():
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{key} must be a string, not {value!r}")
    return Inventory(gpus=gpus, source=source, **optional)


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list")
    return value


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
        return Inventory(problem=NO_DRIVER)
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
            return from_json(load_json(recorded), f"recorded: {recorded}")
        except ValueError as exc:  # BadFile included
            raise PreflightError(
                f"{RECORDED_VAR}={recorded}: {exc}", "fix the file or unset the variable"
            ) from None
    return _nvml()
