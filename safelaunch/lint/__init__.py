"""Lint: the DDP mistakes a training script shows before it runs (static; see docs/lint.md).

`safelaunch lint SCRIPT` runs it alone; every launch runs it too (cached by the
script's content, so a launch pays a hash and a small read) and shows the findings as
warnings in the banner; a failure whose class matches a finding says so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from safelaunch.interpreter import paused
from safelaunch.vocab import FailureClass, StrEnum

if TYPE_CHECKING:  # the rules and the parser are loaded only to lint (lint_source): a
    # launch whose script was linted before reads the cache and needs neither (launch cost)
    from safelaunch.lint.rules import Rule

# Bumped whenever a rule changes what it finds: cached results of older rules are ignored.
RULES_VERSION = "2"  # 2: the script's uses (uses.py) are cached too


class Severity(StrEnum):
    """A rule's (here, not in rules.py: a launch reads the cache's words back without them)."""

    ERROR = "error"
    WARNING = "warning"
    HINT = "hint"


BLOCKING = (Severity.ERROR, Severity.WARNING)  # what --strict (and the exit code) count


@dataclass(frozen=True, slots=True, kw_only=True)
class LintFinding:
    """One mistake at one place."""

    rule: str
    severity: Severity
    line: int
    col: int
    message: str
    why: str
    fix: str
    klass: FailureClass
    signatures: tuple[str, ...]

    def render(self, script: str) -> str:
        return f"{script}:{self.line}: {self.severity} {self.rule}: {self.message}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptUses:
    """What the script needs of the machine (uses.py), line numbers first use first."""

    cuda: tuple[int, ...] = ()  # .cuda(), torch.cuda.set_device(...), device="cuda"
    nccl: tuple[int, ...] = ()  # init_process_group("nccl")
    env: tuple[tuple[str, int], ...] = ()  # os.environ["X"] reads
    paths: tuple[tuple[str, int], ...] = ()  # literal paths it reads


@dataclass(frozen=True, slots=True, kw_only=True)
class LintResult:
    """The findings, or why the script could not be read."""

    findings: tuple[LintFinding, ...] = ()
    problem: str | None = None  # e.g. a SyntaxError: the script will fail on its own
    uses: ScriptUses = ScriptUses()

    @property
    def blocking(self) -> tuple[LintFinding, ...]:
        return tuple(f for f in self.findings if f.severity in BLOCKING)


def _finding(rule: Rule, line: int, col: int) -> LintFinding:
    return LintFinding(
        rule=rule.id,
        severity=rule.severity,
        line=line,
        col=col,
        message=rule.title,
        why=rule.why,
        fix=rule.fix,
        klass=rule.klass,
        signatures=rule.signatures,
    )


def lint_source(source: str | bytes, filename: str = "<script>") -> LintResult:
    """Every rule over one script's text."""
    from safelaunch.lint.rules import RULES
    from safelaunch.lint.scan import parse
    from safelaunch.lint.uses import script_uses

    # a parse allocates ~40 objects a line: dozens of collections that find nothing
    # (a syntax tree has no cycles; ~10% of a cold lint)
    with paused():
        try:
            script = parse(source, filename)
        except (SyntaxError, ValueError) as exc:  # ValueError: NUL bytes
            where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
            return LintResult(problem=f"not parsed: {type(exc).__name__}{where}")
        found = {
            (node.lineno, node.col_offset, rule.id): _finding(rule, node.lineno, node.col_offset)
            for rule in RULES
            for node in rule.check(script)
        }
        uses = script_uses(script)
    return LintResult(findings=tuple(found[key] for key in sorted(found)), uses=uses)


def to_json(result: LintResult) -> str:
    findings = [asdict(f) for f in result.findings]
    record = {"problem": result.problem, "findings": findings, "uses": asdict(result.uses)}
    return json.dumps(record, indent=1)


def _pairs(items: Sequence[Sequence[object]]) -> tuple[tuple[str, int], ...]:
    return tuple((str(name), int(str(line))) for name, line in items)


def from_json(text: str) -> LintResult:
    """The inverse of to_json; KeyError, TypeError or ValueError for what it never wrote."""
    data = json.loads(text)
    findings = tuple(
        LintFinding(
            **{
                **item,
                "severity": Severity(item["severity"]),
                "klass": FailureClass(item["klass"]),
                "signatures": tuple(item["signatures"]),
            }
        )
        for item in data["findings"]
    )
    used = data["uses"]
    uses = ScriptUses(
        cuda=tuple(int(line) for line in used["cuda"]),
        nccl=tuple(int(line) for line in used["nccl"]),
        env=_pairs(used["env"]),
        paths=_pairs(used["paths"]),
    )
    return LintResult(findings=findings, problem=data["problem"], uses=uses)


def related(
    findings: Sequence[LintFinding], klass: FailureClass | None, signature: str | None
) -> list[LintFinding]:
    """Findings that predicted this failure: its signature first, else its class."""
    if signature is not None:
        exact = [f for f in findings if signature in f.signatures]
        if exact:
            return exact
    return [f for f in findings if klass is not None and f.klass == klass]
