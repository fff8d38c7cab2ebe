"""`safelaunch doctor`: every preflight check, nothing launched, a verdict per line."""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import asdict
from typing import Any

from safelaunch import __version__, exitcodes
from safelaunch.gpu_inventory import read_inventory, to_json
from safelaunch.preflight import DEFAULT_MASTER_ADDR
from safelaunch.preflight.mapping import plan_gpus
from safelaunch.preflight.probe import probe_torch, torch_findings
from safelaunch.preflight.system import ERROR, OK, WARNING, CheckLevel, Finding, system_findings
from safelaunch.preflight.visible import parse_visible


def examine(nproc: int | None, master_addr: str | None) -> dict[str, Any]:
    """Every check; `nproc` defaults to one rank per visible GPU (or 1)."""
    environ = dict(os.environ)
    inventory = read_inventory(environ)
    facts = probe_torch()
    visible = parse_visible(environ.get("CUDA_VISIBLE_DEVICES"), inventory.gpus).devices
    ranks = nproc or max(1, len(visible))
    gpus = plan_gpus(inventory, environ, ranks)
    findings: list[Finding] = []
    if inventory.gpus:
        findings.append(
            Finding(
                level=OK,
                code="driver",
                message=f"NVIDIA driver {inventory.driver_version} (CUDA up to "
                f"{inventory.cuda_driver_version}), {len(inventory.gpus)} GPU(s)",
            )
        )
    else:
        findings.append(Finding(level=OK, code="driver", message=inventory.problem or "no GPU"))
    findings += [Finding(level=ERROR, code="gpu", message=m, fix=f) for m, f in gpus.errors]
    findings += [Finding(level=WARNING, code="gpu", message=m) for m in gpus.warnings]
    findings += torch_findings(facts, len(visible), inventory.cuda_driver_version)
    findings += system_findings(environ, master_addr or DEFAULT_MASTER_ADDR, len(visible))
    return {
        "safelaunch": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "ranks_checked": ranks,
        "inventory": to_json(inventory),
        "mapping": list(gpus.lines),
        "torch": asdict(facts),
        "findings": [asdict(f) for f in findings],
        "verdict": _verdict(findings),
    }


def _verdict(findings: list[Finding]) -> CheckLevel:
    levels = {f.level for f in findings}
    return ERROR if ERROR in levels else WARNING if WARNING in levels else OK


def render(report: dict[str, Any]) -> str:
    """A line per check, its verdict first."""
    lines = [
        f"safelaunch {report['safelaunch']}, python {report['python']}, {report['platform']}",
        *(f"  {line}" for line in report["mapping"]),
    ]
    for finding in report["findings"]:
        fix = f"  -> {finding['fix']}" if finding["fix"] and finding["level"] != OK else ""
        lines.append(f"{finding['level']:<8}{finding['code']:<20}{finding['message']}{fix}")
    lines.append(f"verdict: {report['verdict']} (for {report['ranks_checked']} rank(s))")
    return "\n".join(lines)


def doctor(nproc: int | None, master_addr: str | None, as_json: bool) -> tuple[str, int]:
    """The report, and an exit code: 0 ok or warnings, 78 when a check fails."""
    report = examine(nproc, master_addr)
    text = json.dumps(report, indent=1) if as_json else render(report)
    return text, exitcodes.PREFLIGHT if report["verdict"] == ERROR else exitcodes.SUCCESS
