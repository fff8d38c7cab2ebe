"""Preflight: resolve what must be known before spawning, and refuse what cannot run."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from safelaunch import defaults
from safelaunch.config import LaunchConfig, NprocWord
from safelaunch.errors import PreflightError
from safelaunch.gpu_inventory import NO_DRIVER, Inventory, read_inventory
from safelaunch.lint import LintFinding, LintResult, ScriptUses
from safelaunch.preflight.crosscheck import cross_check, rank_names
from safelaunch.preflight.entry_script import compile_entry
from safelaunch.preflight.logroot import check_log_root
from safelaunch.preflight.mapping import hides_every_gpu, plan_gpus
from safelaunch.preflight.ports import PortInUse, PortReservation, reserve_free_port, reserve_port
from safelaunch.preflight.probe import probe_torch, torch_findings
from safelaunch.preflight.system import (
    ERROR,
    WARNING,
    Finding,
    crowding_finding,
    system_findings,
)
from safelaunch.preflight.visible import parse_visible
from safelaunch.rank.pathentry import is_path_entry

DEFAULT_MASTER_ADDR = defaults.MASTER_ADDR


@dataclass(frozen=True, slots=True, kw_only=True)
class PreflightReport:
    """What the plan needs from the environment: rank count and rendezvous address."""

    nproc: int
    nproc_reason: str
    master_addr: str
    master_port: PortReservation
    gpu_lines: tuple[str, ...] = ()  # local rank -> cuda:N -> physical GPU, for the banner
    visible_gpus: int | None = None  # GPUs the ranks will see (0: NCCL cannot run); None: unknown
    warnings: tuple[str, ...] = ()
    lint: tuple[LintFinding, ...] = ()  # DDP mistakes seen in the script (safelaunch lint)
    # multi-node: what every node must have alike (compared across nodes at the rendezvous)
    node_facts: Mapping[str, str | int | None] = field(default_factory=dict)


def node_facts(inventory: Inventory, environ: Mapping[str, str]) -> dict[str, str | int | None]:
    """torch / CUDA / NCCL versions (probed in a subprocess), driver, visible GPU count."""
    facts = probe_torch()
    visible = parse_visible(environ.get("CUDA_VISIBLE_DEVICES"), inventory.gpus)
    return {
        "torch": facts.torch if facts.import_error is None else f"broken ({facts.import_error})",
        "cuda": facts.cuda,
        "nccl": facts.nccl,
        "driver": inventory.driver_version,
        "gpus": len(visible.devices),
    }


def resolve_nproc(config: LaunchConfig, inventory: Inventory) -> tuple[int, str]:
    """Turn gpu / cpu / auto into a rank count, with the reason for the banner."""
    wanted = config.nproc_per_node
    if isinstance(wanted, int):
        return wanted, "--nproc-per-node"
    cpus = len(os.sched_getaffinity(0))
    if wanted == NprocWord.CPU:
        return cpus, "one per CPU (--nproc-per-node=cpu)"
    visible = parse_visible(config.environ.get("CUDA_VISIBLE_DEVICES"), inventory.gpus)
    gpus = len(visible.devices)
    if gpus:
        return gpus, f"one per visible GPU (--nproc-per-node={wanted})"
    hidden = hides_every_gpu(config.environ.get("CUDA_VISIBLE_DEVICES"), inventory)
    if hidden is not None:
        raise PreflightError(*hidden)
    if wanted == NprocWord.GPU:
        why = inventory.problem or "CUDA_VISIBLE_DEVICES hides them all"
        raise PreflightError(
            f"--nproc-per-node=gpu but no GPU is visible ({why})",
            "give a number of ranks, e.g. --nproc-per-node=2 for a CPU/Gloo job",
        )
    return cpus, "one per CPU: no GPU visible (--nproc-per-node=auto)"


def check_entry_point(config: LaunchConfig) -> None:
    """The script (or executable) must exist; modules are resolved by the ranks."""
    script = config.training_script
    if config.module and not config.run_path:
        return  # finding a module would mean importing its package here
    if config.no_python and not config.run_path:
        if shutil.which(script) is None:
            raise PreflightError(
                f"--no-python: {script!r} is not an executable file or a command on PATH",
                "check the path and that it is executable (chmod +x)",
            )
        return
    if Path(script).is_dir() and not is_path_entry(script):
        raise PreflightError(
            f"training script {script!r} is a directory without a __main__.py",
            "name the script inside it, or add a __main__.py (python runs a directory so)",
        )
    if not Path(script).exists():
        raise PreflightError(
            f"training script {script!r} not found (working directory: {os.getcwd()})",
            "check the path, or pass -m for a module",
        )
    _refuse_special_file(script)


def _refuse_special_file(script: str) -> None:
    """The script must be a regular file (or a directory, checked above). A pipe
    (`<(...)`, /dev/stdin fed by a pipe) would block the first open until a writer comes,
    forever for a FIFO nobody writes; and every rank reads the script, while a pipe's
    bytes go to the first reader only. A device or a socket is no script either."""
    try:
        mode = os.stat(script).st_mode
    except OSError:
        return  # unreadable: python says so in the rank
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    kind = "a pipe (FIFO)" if stat.S_ISFIFO(mode) else "not a regular file (a device or socket)"
    raise PreflightError(
        f"training script {script!r} is {kind}: every rank must read the same script",
        "save it to a file and launch that file",
    )


def lint_script(config: LaunchConfig) -> LintResult:
    """The script's DDP mistakes and uses (cached by content); with --strict an error or
    warning stops."""
    if not config.lint or ((config.module or config.no_python) and not config.run_path):
        return LintResult()  # a module or an executable: no script file of ours to read
    from safelaunch.lint import BLOCKING
    from safelaunch.lint.cache import lint_cached

    result = lint_cached(Path(config.training_script), config.environ)
    if config.strict:
        for finding in result.findings:
            if finding.severity in BLOCKING:
                raise PreflightError(
                    f"lint: {finding.render(config.training_script)}",
                    f"{finding.fix} (a lint {finding.severity}; --strict made it fatal; "
                    "--no-lint skips the check)",
                )
    return result


def reserve_master(config: LaunchConfig) -> tuple[str, PortReservation]:
    """MASTER_ADDR and a MASTER_PORT this run owns."""
    addr = config.master_addr or DEFAULT_MASTER_ADDR
    try:
        if config.master_port and not config.standalone:  # 0: a free port, as with none
            return addr, reserve_port(config.master_port)
        return addr, reserve_free_port()
    except PortInUse as exc:
        raise PreflightError(
            f"MASTER_PORT: {exc}", "pick another --master-port, or omit it to get a free one"
        ) from None


def findings_of(
    config: LaunchConfig, inventory: Inventory, nproc: int, uses: ScriptUses | None = None
) -> tuple[tuple[str, ...], list[Finding]]:
    """The GPU mapping lines and every finding (GPU, system, and what the script uses
    against what the machine offers)."""
    gpus = plan_gpus(inventory, config.environ, nproc)
    findings = [Finding(level=ERROR, code="gpu", message=m, fix=f) for m, f in gpus.errors]
    findings += [Finding(level=WARNING, code="gpu", message=m) for m in gpus.warnings]
    addr = config.master_addr or DEFAULT_MASTER_ADDR
    findings += system_findings(config.environ, addr, len(gpus.visible.devices))
    findings.append(crowding_finding(nproc, len(os.sched_getaffinity(0))))
    facts = None
    if gpus.visible.devices:  # what the probe compares only matters with GPUs (doctor: always)
        facts = probe_torch()
        findings += torch_findings(facts, len(gpus.visible.devices), inventory.cuda_driver_version)
    if uses is not None:
        findings += cross_check(
            uses,
            script=config.training_script,
            gpus=len(gpus.visible.devices),
            torch=facts,
            rank_env=rank_names(config.environ),
            cwd=Path.cwd(),
        )
    return gpus.lines, findings


def run_preflight(config: LaunchConfig) -> PreflightReport:
    """Every check that must pass before a rank starts; errors stop the launch (exit 78)."""
    check_log_root(config.log_dir)  # always, --no-preflight too: it is about safety
    inventory = read_inventory(config.environ)
    nproc, reason = resolve_nproc(config, inventory)
    check_entry_point(config)
    compile_entry(config)
    lint = lint_script(config)
    lines: tuple[str, ...] = ()
    warnings: list[Finding] = []
    if config.preflight:
        lines, findings = findings_of(config, inventory, nproc, lint.uses)
        fatal = (ERROR, WARNING) if config.strict else (ERROR,)
        for finding in findings:
            if finding.level in fatal:
                fix = finding.fix + (
                    " (a warning; --strict made it fatal)" if finding.level == WARNING else ""
                )
                raise PreflightError(finding.message, fix.strip() or None)
        warnings = [f for f in findings if f.level == WARNING]
    multi_node = config.nnodes[1] > 1
    if multi_node:  # the rendezvous gives the workers' store address
        addr, port = "", PortReservation(port=0, lock_fd=None)
    else:
        addr, port = reserve_master(config)
    return PreflightReport(
        nproc=nproc,
        nproc_reason=reason,
        master_addr=addr,
        master_port=port,
        gpu_lines=lines,
        warnings=tuple(f"{w.message}; {w.fix}" if w.fix else w.message for w in warnings),
        lint=lint.findings,
        node_facts=node_facts(inventory, config.environ) if multi_node else {},
        visible_gpus=visible_gpus(inventory, config.environ.get("CUDA_VISIBLE_DEVICES")),
    )


def visible_gpus(inventory: Inventory, value: str | None) -> int | None:
    """How many GPUs the ranks will see; None where a driver is there but NVML listed none."""
    if value is not None and not value.strip():
        return 0  # hidden on purpose
    if inventory.problem is not None and inventory.problem != NO_DRIVER:
        return None
    return len(parse_visible(value, inventory.gpus).devices)
