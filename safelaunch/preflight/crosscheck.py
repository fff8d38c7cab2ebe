"""What the script uses against what the machine offers: one warning each, before any start.

The uses come from lint's parse, cached by content (lint/uses.py): CUDA calls, the NCCL
backend, `os.environ["X"]` reads, literal paths it reads. The machine's side is what
preflight already knows: the visible GPUs, the probe's CUDA build (run in a subprocess,
only where GPUs are visible), the environment the ranks will get, the working directory.
Warnings, never fatal unless --strict (run_preflight's rule for every warning).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path

from safelaunch.debugenv import PROFILES
from safelaunch.lint import ScriptUses
from safelaunch.preflight.probe import TorchFacts
from safelaunch.preflight.system import WARNING, Finding

# What the launcher sets for every rank beside the user's environment (plan.rank_env,
# shared_env; tests/test_crosscheck.py checks this against a built plan)
TORCHRUN_NAMES = frozenset(
    {"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE"}
    | {"WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    | {"TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID"}
    | {"TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE"}
    | {"TORCHELASTIC_SIGNALS_TO_HANDLE", "OMP_NUM_THREADS", "TORCH_NCCL_ASYNC_ERROR_HANDLING"}
    | {"PYTHONUNBUFFERED"}
    | {name for profile in PROFILES.values() for name, _, _ in profile}
)


def rank_names(environ: Mapping[str, str]) -> frozenset[str]:
    """The variables every rank will have: the launcher's environment and what it adds."""
    return TORCHRUN_NAMES | frozenset(environ)


def _warning(message: str, fix: str) -> Finding:
    return Finding(level=WARNING, code="uses", message=message, fix=fix)


def _devices(uses: ScriptUses, script: str, gpus: int, torch: TorchFacts | None) -> list[Finding]:
    found = []
    if uses.cuda:
        where = f"{script}:{uses.cuda[0]}"
        if gpus == 0:
            found.append(
                _warning(
                    f"{where} uses CUDA but no GPU is visible here",
                    "check nvidia-smi and CUDA_VISIBLE_DEVICES, or keep tensors on 'cpu'",
                )
            )
        elif torch is not None and torch.import_error is None and torch.cuda is None:
            found.append(
                _warning(
                    f"{where} uses CUDA but torch here is a CPU build ({torch.torch})",
                    "install a CUDA build of torch into the ranks' interpreter",
                )
            )
    if uses.nccl:
        where = f"{script}:{uses.nccl[0]}"
        if gpus == 0:
            found.append(
                _warning(
                    f"{where} asks for the NCCL backend but no GPU is visible here",
                    "NCCL runs on GPUs only: use backend='gloo' on CPU",
                )
            )
        elif torch is not None and torch.import_error is None and not torch.nccl_available:
            found.append(
                _warning(
                    f"{where} asks for the NCCL backend but torch here has no NCCL",
                    "install a CUDA build of torch with NCCL, or use backend='gloo'",
                )
            )
    return found


def cross_check(
    uses: ScriptUses,
    *,
    script: str,
    gpus: int,
    torch: TorchFacts | None,
    rank_env: Collection[str],
    cwd: Path,
) -> list[Finding]:
    """One warning per need the machine does not meet (the first place it is needed)."""
    found = _devices(uses, script, gpus, torch)
    missing: dict[str, int] = {}
    for name, line in uses.env:
        if name not in rank_env:
            missing.setdefault(name, line)
    for name, line in missing.items():
        found.append(
            _warning(
                f"{script}:{line} reads os.environ[{name!r}], which the ranks will not have",
                f"export {name}=... before launching, or read it with os.environ.get()",
            )
        )
    seen: set[str] = set()
    for path, line in uses.paths:
        if path in seen:
            continue
        seen.add(path)
        if not os.path.exists(path if os.path.isabs(path) else cwd / path):
            where = "" if os.path.isabs(path) else f" (relative to the working directory {cwd})"
            found.append(
                _warning(
                    f"{script}:{line} reads {path!r}, which does not exist here{where}",
                    "check the path; on several nodes, that it exists on every node",
                )
            )
    return found
