"""Lint findings for people: `safelaunch lint` (why, fix, exit code), the banner, a failure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from safelaunch import exitcodes
from safelaunch.errors import SafelaunchError
from safelaunch.lint import LintFinding, LintResult, Severity, lint_source


class UnreadableScript(SafelaunchError):
    """`safelaunch lint SCRIPT` on a script it cannot read: nothing checked."""

    exit_code = exitcodes.USAGE


def render(script: str, result: LintResult) -> str:
    """Each finding on its line, its why and fix under it; a count at the end."""
    from safelaunch.lint.rules import RULES  # here: a launch renders only its banner

    if result.problem is not None:
        return f"{script}: {result.problem}; nothing checked"
    lines = []
    for finding in result.findings:
        lines.append(finding.render(script))
        lines.append(f"  why: {finding.why}")
        lines.append(f"  fix: {finding.fix}")
    if not result.findings:
        return f"{script}: no DDP mistakes found ({len(RULES)} rules)"
    counts = {level: 0 for level in Severity}
    for finding in result.findings:
        counts[finding.severity] += 1
    summary = ", ".join(f"{n} {level}{'s' if n != 1 else ''}" for level, n in counts.items())
    lines.append(f"{script}: {summary}")
    return "\n".join(lines)


def lint_report(script: str, as_json: bool) -> tuple[str, int]:
    """The text (or JSON) for the terminal, and the exit code.

    A script that cannot be read raises UnreadableScript; with --json it is a JSON error
    on stdout instead, with the same exit code.
    """
    try:
        source = _read(script)
    except UnreadableScript as exc:
        if not as_json:
            raise
        return json.dumps({"script": script, "error": exc.message}), exc.exit_code
    result = lint_source(source, script)
    code = exitcodes.LINT_FINDINGS if result.blocking else exitcodes.SUCCESS
    if as_json:
        payload = {
            "script": script,
            "problem": result.problem,
            "findings": [asdict(f) for f in result.findings],
        }
        return json.dumps(payload, indent=2), code
    return render(script, result), code


def _read(script: str) -> bytes:
    try:
        return Path(script).read_bytes()
    except OSError as exc:
        raise UnreadableScript(f"lint: {script}: {exc.strerror or exc}") from None


def lint_banner(script: str, findings: Sequence[LintFinding]) -> str:
    """Errors and warnings one line each, hints counted: never in the way of the launch.

    Only shown with an error or warning: hints alone are for `safelaunch lint`.
    """
    shown = [f for f in findings if f.severity != Severity.HINT]
    lines = [f"lint: {f.render(script)}; fix: {f.fix}" for f in shown]
    hints = len(findings) - len(shown)
    more = f"{hints} hint(s) more; " if hints else ""
    lines.append(f"lint: {more}details: safelaunch lint {script}; --no-lint turns this off")
    return "\n".join(lines)


def lint_match(script: str, findings: Sequence[LintFinding]) -> str:
    """Lines for the failure summary: lint findings in the same class as this failure."""
    return "".join(
        f"\n  lint:  before launch, lint found in the same script ({f.klass}): "
        f"{f.render(script)}; fix: {f.fix}"
        for f in findings[:3]
    )
