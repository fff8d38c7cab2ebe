"""CUDA_VISIBLE_DEVICES as the CUDA runtime reads it, and which GPU each rank gets.

The runtime takes comma-separated entries (spaces ignored): ordinals, `GPU-<uuid>`
(a unique prefix is enough) or `MIG-<uuid>`. An empty value hides every GPU. At the
first entry it cannot use (`-1`, an index out of range, an unknown UUID) it silently
stops: later entries are ignored. safelaunch says exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass

from safelaunch.gpu_inventory import Gpu


@dataclass(frozen=True, slots=True, kw_only=True)
class VisibleGpu:
    """What a rank sees as cuda:N."""

    cuda_index: int
    gpu: Gpu
    mig: str | None = None  # the MIG instance's UUID when the entry named one


@dataclass(frozen=True, slots=True, kw_only=True)
class Visibility:
    """The parsed variable: visible devices in cuda:N order, and what was dropped why."""

    devices: tuple[VisibleGpu, ...]
    stopped_at: str | None = None  # the first entry CUDA could not use
    ignored: tuple[str, ...] = ()  # entries after it, which CUDA silently drops
    duplicates: tuple[str, ...] = ()


def _resolve(entry: str, gpus: tuple[Gpu, ...]) -> tuple[Gpu, str | None] | None:
    if entry.startswith("MIG-"):
        for gpu in gpus:
            for mig in gpu.mig:
                if mig == entry or mig.startswith(entry):
                    return gpu, mig
        return None
    if entry.startswith("GPU-"):
        found = [g for g in gpus if g.uuid.startswith(entry)]
        return (found[0], None) if len(found) == 1 else None  # ambiguous prefixes fail too
    try:
        index = int(entry)
    except ValueError:
        return None
    return (gpus[index], None) if 0 <= index < len(gpus) else None


def parse_visible(value: str | None, gpus: tuple[Gpu, ...]) -> Visibility:
    """Which GPUs the ranks will see, given the variable's value (None: unset)."""
    if value is None:
        return Visibility(devices=tuple(VisibleGpu(cuda_index=g.index, gpu=g) for g in gpus))
    entries = [entry.strip() for entry in value.split(",")] if value.strip() else []
    devices: list[VisibleGpu] = []
    seen: set[tuple[int, str | None]] = set()
    duplicates: list[str] = []
    for position, entry in enumerate(entries):
        resolved = _resolve(entry, gpus)
        if resolved is None:
            return Visibility(
                devices=tuple(devices),
                stopped_at=entry,
                ignored=tuple(entries[position + 1 :]),
                duplicates=tuple(duplicates),
            )
        key = (resolved[0].index, resolved[1])
        if key in seen:
            duplicates.append(entry)
            continue
        seen.add(key)
        devices.append(VisibleGpu(cuda_index=len(devices), gpu=resolved[0], mig=resolved[1]))
    return Visibility(devices=tuple(devices), duplicates=tuple(duplicates))
