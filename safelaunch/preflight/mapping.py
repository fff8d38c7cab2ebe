"""Which physical GPU each local rank gets, and what is wrong with that before it spawns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from safelaunch.gpu_inventory import Inventory
from safelaunch.preflight.visible import Visibility, parse_visible

LOW_FREE = 0.1  # a GPU with less than this share free counts as busy


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuPlan:
    """The mapping lines for the banner, warnings to print, errors that stop the launch."""

    lines: tuple[str, ...]
    warnings: tuple[str, ...]
    errors: tuple[tuple[str, str], ...]  # (what is wrong, how to fix it)
    visible: Visibility


def _describe(visibility: Visibility, local_rank: int) -> str:
    device = visibility.devices[local_rank]
    gpu = device.gpu
    name = f"{gpu.name}, MIG {device.mig[:12]}" if device.mig else gpu.name
    others = f", {len(gpu.processes)} other process(es)" if gpu.processes else ""
    return (
        f"local rank {local_rank} -> cuda:{device.cuda_index} -> GPU {gpu.index} "
        f"({gpu.uuid[:12]}, {name}, {gpu.memory_free_mib / 1024:.0f} GiB free{others})"
    )


def _busy(visibility: Visibility, nproc: int) -> list[str]:
    warnings = []
    for device in visibility.devices[:nproc]:
        gpu = device.gpu
        for process in gpu.processes:
            warnings.append(
                f"GPU {gpu.index} is in use by pid {process.pid} ({process.user}: "
                f"{process.command}, {process.memory_mib} MiB)"
            )
        if not gpu.processes and gpu.memory_free_mib < LOW_FREE * gpu.memory_total_mib:
            warnings.append(
                f"GPU {gpu.index} has only {gpu.memory_free_mib} MiB of "
                f"{gpu.memory_total_mib} MiB free"
            )
    return warnings


def hides_every_gpu(value: str | None, inventory: Inventory) -> tuple[str, str] | None:
    """A set, non-empty CUDA_VISIBLE_DEVICES under which CUDA sees none of this machine's GPUs.

    An empty value hides the GPUs on purpose; `7` on a 4-GPU host or a `GPU-` typo does it
    by accident, and every rank would then run on the CPU or fail far from the cause.
    """
    if value is None or not value.strip() or not inventory.gpus:
        return None
    visibility = parse_visible(value, inventory.gpus)
    if visibility.devices:
        return None
    count = len(inventory.gpus)
    shown = value if value.isprintable() and len(value) <= 80 else repr(value[:80])
    return (
        f"CUDA_VISIBLE_DEVICES={shown}: CUDA will see no GPU (it stops at "
        f"{visibility.stopped_at!r}: no such GPU; this machine has {count}, 0-{count - 1})",
        f"use indexes 0-{count - 1} or GPU UUIDs from `nvidia-smi -L`; to hide the GPUs "
        "on purpose set CUDA_VISIBLE_DEVICES= (empty)",
    )


def plan_gpus(inventory: Inventory, environ: Mapping[str, str], nproc: int) -> GpuPlan:
    """Check the local-rank -> GPU mapping a job of `nproc` ranks per node would get."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    visibility = parse_visible(value, inventory.gpus)
    warnings: list[str] = []
    errors: list[tuple[str, str]] = []
    if not inventory.gpus:
        return GpuPlan(lines=(), warnings=(), errors=(), visible=visibility)
    hidden = hides_every_gpu(value, inventory)
    if hidden is not None:
        errors.append(hidden)
    elif visibility.stopped_at is not None:
        dropped = (
            f"; it ignores {','.join(visibility.ignored)} after it" if visibility.ignored else ""
        )
        warnings.append(
            f"CUDA_VISIBLE_DEVICES={value}: CUDA stops at {visibility.stopped_at!r} (no such GPU)"
            f"{dropped}: the ranks see {len(visibility.devices)} GPU(s)"
        )
    if visibility.duplicates:
        errors.append(
            (
                f"CUDA_VISIBLE_DEVICES={value} names a GPU twice "
                f"({','.join(visibility.duplicates)})",
                "list each GPU once",
            )
        )
    visible = len(visibility.devices)
    if visible and nproc > visible:
        errors.append(
            (
                f"{nproc} ranks but {visible} visible GPU(s): local rank {visible} would fail with "
                "'CUDA error: invalid device ordinal'",
                f"use --nproc-per-node={visible} (or gpu), or make more GPUs visible; for a "
                "CPU-only job hide them with CUDA_VISIBLE_DEVICES=",
            )
        )
    names = {gpu.name for gpu in inventory.gpus}
    if len(names) > 1 and "CUDA_DEVICE_ORDER" not in environ and value is None:
        warnings.append(
            "GPUs of different models and CUDA_DEVICE_ORDER unset: CUDA numbers them fastest "
            "first, nvidia-smi by PCI bus; set CUDA_DEVICE_ORDER=PCI_BUS_ID to make them agree"
        )
    warnings.extend(_busy(visibility, nproc))
    lines = tuple(_describe(visibility, r) for r in range(min(nproc, visible)))
    return GpuPlan(lines=lines, warnings=tuple(warnings), errors=tuple(errors), visible=visibility)
