"""The torch / CUDA / NCCL probe, in a subprocess: the launcher never imports torch.

Importing torch takes seconds, so the result is cached per interpreter and torch
install (keyed by the interpreter's path and the torch package's modification time);
torch is only located here (importlib's find_spec), never imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from safelaunch.preflight.system import ERROR, OK, WARNING, Finding

PROBE_TIMEOUT = 60.0
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "safelaunch"

_PROBE = r"""
import json, sys
facts = {}
try:
    import torch
    import torch.distributed as dist
except BaseException as exc:
    facts["import_error"] = f"{type(exc).__name__}: {exc}"
else:
    facts["torch"] = torch.__version__
    facts["cuda"] = torch.version.cuda
    facts["cuda_available"] = torch.cuda.is_available()
    facts["device_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
    facts["gloo"] = dist.is_available() and dist.is_gloo_available()
    facts["nccl_available"] = dist.is_available() and dist.is_nccl_available()
    try:
        facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:
        facts["nccl"] = None
print(json.dumps(facts))
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchFacts:
    """What the probe found; `import_error` set when torch is missing or broken."""

    torch: str | None = None
    cuda: str | None = None  # the CUDA version torch was built with; None for a CPU build
    cuda_available: bool = False
    device_count: int = 0
    nccl: str | None = None
    nccl_available: bool = False
    gloo: bool = False
    import_error: str | None = None
    seconds: float = 0.0
    cached: bool = False


def _cache_key(python: str) -> str | None:
    # imported here: launches without GPUs never probe, and hashlib loads OpenSSL
    import hashlib
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    mtime = Path(spec.origin).parent.stat().st_mtime_ns
    return hashlib.sha256(f"{os.path.realpath(python)}|{spec.origin}|{mtime}".encode()).hexdigest()


def probe_torch(python: str = sys.executable, use_cache: bool = True) -> TorchFacts:
    """torch's version, CUDA build, NCCL and Gloo as the ranks' interpreter sees them."""
    import time

    key = _cache_key(python) if use_cache else None
    cache = CACHE_DIR / f"torch-probe-{key}.json" if key else None
    if cache is not None:
        with contextlib.suppress(OSError, ValueError, TypeError):
            return TorchFacts(**{**json.loads(cache.read_text()), "cached": True})
    started = time.monotonic()
    try:
        result = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT
        )
        facts = json.loads(result.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        facts = {"import_error": f"`import torch` took over {PROBE_TIMEOUT:.0f} s"}
    except (OSError, ValueError, IndexError):
        facts = {"import_error": "the probe could not run python"}
    found = TorchFacts(**facts, seconds=time.monotonic() - started)
    if cache is not None and found.import_error is None:
        with contextlib.suppress(OSError):
            CACHE_DIR.mkdir(parents=True, exist_ok=True)
            temporary = cache.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(asdict(found)))
            os.replace(temporary, cache)
    return found


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def torch_findings(facts: TorchFacts, gpus: int, driver_cuda: str | None) -> list[Finding]:
    """What the probe means for a job on this machine."""
    if facts.import_error:
        missing = "No module named 'torch'" in facts.import_error
        return [
            Finding(
                level=WARNING if missing else ERROR,
                code="torch-import",
                message=f"import torch fails: {facts.import_error}",
                fix="pip install torch (a build for this driver's CUDA)"
                if missing
                else "reinstall torch (pip install --force-reinstall torch==<version>)",
            )
        ]
    built = f"CUDA {facts.cuda}" if facts.cuda else "CPU build"
    nccl = f"NCCL {facts.nccl}" if facts.nccl_available and facts.nccl else "no NCCL"
    findings = [
        Finding(
            level=OK,
            code="torch",
            message=f"torch {facts.torch} ({built}), {nccl}, gloo {facts.gloo}",
        )
    ]
    if gpus and facts.cuda is None:
        findings.append(
            Finding(
                level=WARNING,
                code="torch-cpu-build",
                message=f"torch is a CPU build but {gpus} GPU(s) are visible: ranks cannot use "
                "them and init_process_group('nccl') fails",
                fix="install a CUDA build of torch for GPU jobs",
            )
        )
    if facts.cuda and driver_cuda:
        built_for, supported = _version(facts.cuda), _version(driver_cuda)
        if built_for[:1] > supported[:1]:
            findings.append(
                Finding(
                    level=ERROR,
                    code="driver-too-old",
                    message=f"torch is built for CUDA {facts.cuda} but the driver supports up to "
                    f"CUDA {driver_cuda}: ranks will fail to initialise CUDA",
                    fix="update the NVIDIA driver, or install a torch build for this CUDA",
                )
            )
        elif built_for > supported:
            findings.append(
                Finding(
                    level=WARNING,
                    code="driver-older-minor",
                    message=f"torch is built for CUDA {facts.cuda}, the driver supports "
                    f"{driver_cuda}: fine by minor-version compatibility unless kernels "
                    "need PTX JIT",
                    fix="update the driver if CUDA reports 'unsupported PTX version'",
                )
            )
    if gpus and facts.cuda and facts.cuda_available and facts.device_count == 0:
        findings.append(
            Finding(
                level=WARNING,
                code="torch-no-device",
                message="NVML sees GPUs but torch sees none",
                fix="check CUDA_VISIBLE_DEVICES and the container's device access",
            )
        )
    return findings
