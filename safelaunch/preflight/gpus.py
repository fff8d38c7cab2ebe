"""How many GPUs this node shows the ranks (through NVML; the launcher never imports torch)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping


def physical_gpu_count() -> int:
    """GPUs the driver reports; 0 when there is no driver or no NVML."""
    try:
        import pynvml  # nvidia-ml-py: imported only when a count is asked for
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError subclasses, also missing libnvidia-ml.so
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def visible_gpu_count(environ: Mapping[str, str]) -> int:
    """GPUs a rank would see: CUDA_VISIBLE_DEVICES narrows the physical ones."""
    physical = physical_gpu_count()
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or physical == 0:
        return physical
    entries = [entry.strip() for entry in visible.split(",")]
    count = 0
    for entry in entries:
        # The CUDA runtime stops at the first entry it cannot use.
        if not entry or entry.startswith("-"):
            break
        count += 1
    return min(count, physical)
