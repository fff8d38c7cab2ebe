"""The run directory is one typed contract: no module outside safelaunch/rundir/ builds the
name of a file or directory in it, and every record reads back what its writer wrote.

The scan is over the package's syntax tree (docstrings and comments may name files: they
do not build them): a string or f-string that is a run-directory name, or a piece of
one, used as a path (an operand of `/`, an argument of join/glob/open/with_name, ...) or
spelled as a whole name (`"report.json"`, `f"rank{rank}.exit.json"`), fails the test with
its place.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import pytest

from safelaunch.rundir import (
    calls_file,
    comm_file,
    exit_file,
    flight_file,
    heartbeat_file,
    layout,
    ledger_file,
    live_file,
    rank_logs,
    report_file,
    stack_files,
)

PACKAGE = Path(__file__).parents[1] / "safelaunch"
RUNDIR = PACKAGE / "rundir"

# Whole names and the fixed pieces of templated ones, taken from the records themselves.
WHOLE = {
    report_file.REPORT,
    report_file.PAGE,
    report_file.TIMELINE,
    rank_logs.LAUNCHER_LOG,
    live_file.DIRECTORY,
    flight_file.DIRECTORY,
    stack_files.DIRECTORY,
    stack_files.HANG_EVIDENCE,
    layout.LATEST,
    layout.ATTEMPT_PREFIX,
    flight_file.TORCH_DUMP_PREFIX,
    live_file.HISTORY_PREFIX,
    "filtered_stdout.log",
    "filtered_stderr.log",
}
SUFFIXES = (
    exit_file.SUFFIX,
    comm_file.SUFFIX,
    ledger_file.SUFFIX,
    calls_file.SUFFIX,
    calls_file.OLD_SUFFIX,
    ".error.json",
    ".stacks",
    ".py-spy.txt",
)
# `rank{...}.json`, `rank{...}.log`, `node{...}.json`: an f-string's fixed parts around a field
PREFIXES = re.compile(r"(^|/)(rank|node|history-node|attempt_)$")
FILE_SUFFIX = re.compile(r"^\.(json|log|txt|stacks)$")
DOTTED = {name for name in WHOLE if "." in name}  # a whole file name, wherever it is spelled
PATH_CALLS = {"join", "glob", "rglob", "open", "with_name", "joinpath", "Path", "iterdir"}


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value for v in node.values if isinstance(v, ast.Constant)]
    return []


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            found.add(id(first.value))
    return found


def _in_path_use(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    parent = parents.get(id(node))
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Div):
        return True
    if isinstance(parent, ast.Call):
        func = parent.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in PATH_CALLS
    return False


def run_dir_names_built_in(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in docs or not isinstance(node, (ast.Constant, ast.JoinedStr)):
            continue
        if isinstance(parents.get(id(node)), ast.JoinedStr):
            continue  # a piece of an f-string: judged with the whole
        pieces = _strings(node)
        whole = "".join(pieces) if isinstance(node, ast.Constant) else None
        named = whole in DOTTED or any(p.endswith(SUFFIXES) for p in pieces)
        templated = (
            isinstance(node, ast.JoinedStr)
            and any(PREFIXES.search(p) for p in pieces)
            and any(FILE_SUFFIX.match(p) for p in pieces)
        )
        pathy = _in_path_use(node, parents) and any(
            p in WHOLE or p.endswith(SUFFIXES) or PREFIXES.search(p) for p in pieces
        )
        if named or templated or pathy:
            shown = path.relative_to(PACKAGE.parent) if PACKAGE in path.parents else path.name
            found.append((node.lineno, f"{shown}:{node.lineno}: {pieces}"))
    return [line for _, line in sorted(found)]


def test_no_module_outside_rundir_builds_a_run_directory_name() -> None:
    offenders = [
        line
        for path in sorted(PACKAGE.rglob("*.py"))
        if RUNDIR not in path.parents
        for line in run_dir_names_built_in(path)
    ]
    assert offenders == []


def test_the_scan_finds_names_built_the_ways_code_builds_them(tmp_path: Path) -> None:
    """The scan itself: each way a module could build a name is caught."""
    source = tmp_path / "example.py"
    source.write_text(
        '"""Writes report.json (a docstring may say so)."""\n'
        'a = attempt / "report.json"\n'
        'b = directory / f"rank{rank}.exit.json"\n'
        'c = os.path.join(d, "flight")\n'
        'd = f"node{node}.json"\n'
        'e = "see the report"\n'
    )
    lines = [line.split(":")[1] for line in run_dir_names_built_in(source)]
    assert lines == ["2", "3", "4", "5"]


# --- every record reads back what its writer wrote (the rank's writers, the launcher's readers)


def test_a_heartbeat_record_reads_back_as_written(tmp_path: Path) -> None:
    where = heartbeat_file.path(tmp_path, 3)
    frames = [("/w/train.py", 12, "step"), ("/w/train.py", 40, "<module>")]
    heartbeat_file.write(
        str(where),
        since=1.5,
        now=2.5,
        frames=frames,
        depth=2,
        step=7,
        seq=4,
        busy=True,
        cost=0.01,
        spins=False,
        optimizer_steps=6,
    )
    beat = heartbeat_file.read(3, where)
    assert beat is not None
    assert (beat.rank, beat.time, beat.since, beat.step, beat.seq) == (3, 2.5, 1.5, 7, 4)
    assert beat.frames == tuple(frames)
    assert (beat.busy, beat.optimizer_steps, beat.pid) == (True, 6, os.getpid())
    assert json.loads(where.read_text())["version"] == heartbeat_file.VERSION


@pytest.mark.parametrize("text", ["", "[]", '{"time": 1}', '{"time": "x", "since": 1}', "{" * 9999])
def test_a_malformed_heartbeat_record_reads_as_none(tmp_path: Path, text: str) -> None:
    where = heartbeat_file.path(tmp_path, 0)
    where.write_text(text)
    assert heartbeat_file.read(0, where) is None


def test_an_exit_record_reads_back_as_written(tmp_path: Path) -> None:
    exit_file.write(
        str(tmp_path / exit_file.name(2)),
        how="sys.exit",
        code=3,
        frames=[("/w/train.py", 9, "main")],
        now=1.0,
        seq=5,
    )
    (tmp_path / exit_file.name("x")).write_text("{}")  # not a rank's
    records = exit_file.read_all(tmp_path)
    assert list(records) == [2]
    assert records[2].how == "sys.exit" and records[2].code == 3 and records[2].seq == 5
    assert records[2].frames == (("/w/train.py", 9, "main"),) and records[2].left_at is None


def test_a_backend_record_reads_back_as_written(tmp_path: Path) -> None:
    comm_file.write(
        str(comm_file.path(tmp_path, 1)),
        {"requested": "nccl", "used": "gloo", "swapped": True, "groups": [], "ddp": True},
    )
    record = comm_file.read_all(tmp_path)[1]
    assert (record.requested, record.used, record.swapped, record.ddp) == (
        "nccl",
        "gloo",
        True,
        True,
    )


def test_a_ledger_reads_back_as_written(tmp_path: Path) -> None:
    writer = ledger_file.LedgerWriter(str(tmp_path / ledger_file.name(0)))
    writer.write("all_reduce", "float32[4]")
    writer.write("barrier", "")
    assert ledger_file.read_all(tmp_path) == {
        0: {1: ("all_reduce", "float32[4]"), 2: ("barrier", "")}
    }


def test_a_call_ledger_reads_back_as_written(tmp_path: Path) -> None:
    writer = calls_file.CallsWriter(str(calls_file.path(tmp_path, 2)))
    writer.group("0", [0, 1, 2], "default_pg")
    writer.collective(1, True, "0", 1, "all_reduce", "float32[4] SUM", "/w/train.py:9")
    writer.done(1)
    writer.p2p(2, False, "0", "irecv", None, 3, "int64[2]", "/w/train.py:12")
    ledger = calls_file.read_all(tmp_path)[2]
    assert ledger.groups == (calls_file.Group(name="0", ranks=(0, 1, 2), desc="default_pg"),)
    first, second = ledger.calls
    assert (first.op, first.count, first.what, first.where, first.done) == (
        "all_reduce",
        1,
        "float32[4] SUM",
        "/w/train.py:9",
        True,
    )
    assert (second.kind, second.peer, second.tag, second.blocking) == ("p2p", None, 3, False)
    assert second.blocked and not first.blocked  # the rank's last call, not seen completed


def test_a_backend_record_keeps_the_rank_s_socket_addresses(tmp_path: Path) -> None:
    comm_file.write(str(comm_file.path(tmp_path, 0)), {"addresses": [["127.0.0.1", 4000]]})
    assert comm_file.read_all(tmp_path)[0].addresses == (("127.0.0.1", 4000),)


def test_a_flight_record_reads_back_as_written(tmp_path: Path) -> None:
    record = {"entries": [], "safelaunch": {"rank": 5}}
    flight_file.write(str(flight_file.directory(tmp_path)), 5, json.dumps(record).encode())
    assert flight_file.read_ours(flight_file.directory(tmp_path)) == {5: record}
    assert flight_file.record_files(tmp_path) == [flight_file.path(tmp_path, 5)]
    assert flight_file.is_ours(flight_file.path(tmp_path, 5))


def test_records_are_frozen_and_compare_by_value() -> None:
    beat = heartbeat_file.Beat(rank=0, time=1.0, since=1.0, frames=(), step=None, seq=None)
    assert beat == heartbeat_file.Beat(rank=0, time=1.0, since=1.0, frames=(), step=None, seq=None)
    assert beat.spins is False and beat.cost == 0.0  # defaults
    with pytest.raises(AttributeError):
        beat.rank = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        heartbeat_file.Beat(rank=0, time=1.0)  # type: ignore[call-arg]
    assert "rank=0" in repr(beat) and hash(beat) == hash(beat)


@pytest.mark.parametrize(
    ("name", "prefix", "suffix", "number"),
    [
        ("rank12.exit.json", "rank", ".exit.json", 12),
        ("rank.exit.json", "rank", ".exit.json", None),
        ("rank1.2.exit.json", "rank", ".exit.json", None),
        ("rank١.exit.json", "rank", ".exit.json", None),  # not an ASCII digit
        ("attempt_3", "attempt_", "", 3),
        ("isolate_gloo", "attempt_", "", None),
    ],
)
def test_a_numbered_name_reads_back_its_number(
    name: str, prefix: str, suffix: str, number: int | None
) -> None:
    assert layout.numbered(name, prefix, suffix) == number
