"""Uneven iterations: whether a hung rank left a loop that the others still run.

Read from the ranks' Python stacks and the user's source (ast): the hang's groups
(analysis.py) name who is where; this says whether the odd ones out ran a loop fewer
(or more) times than the others, i.e. ran out of data, rather than called a collective
the others did not.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from safelaunch.diagnose.pytypes import RANK_LEFT_EARLY
from safelaunch.diagnose.reading import read_tail
from safelaunch.diagnose.signatures import Signature

if TYPE_CHECKING:
    from safelaunch.hangs.analysis import Whereabouts

SOURCE_LIMIT = 1 << 20  # a script's source read to place a line in its loops

Frames = tuple[tuple[str, int, str], ...]  # (path, line, function), innermost first

UNEVEN_ITERATIONS = Signature(
    id="uneven-iterations",
    klass=RANK_LEFT_EARLY.klass,
    meaning="the ranks ran a loop a different number of times: one left it (it ran out of "
    "batches) and waits in a collective after it, while the others still run it",
    next_steps=(
        *RANK_LEFT_EARLY.next_steps[:2],
        "count the batches on every rank (len(loader)) before the loop: they must be equal",
    ),
)


_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
Chain = list[tuple[ast.stmt, list[ast.stmt]]]  # (statement, the block it is in), outermost first


def _parse(path: str, cache: dict[str, ast.Module | None]) -> ast.Module | None:
    """The user's source file, parsed once; None when unreadable, too big or not Python."""
    if path not in cache:
        text = read_tail(Path(path), SOURCE_LIMIT + 1)
        try:
            with warnings.catch_warnings():  # the user's invalid escapes are not ours to print
                warnings.simplefilter("ignore")
                cache[path] = ast.parse(text) if 0 < len(text) <= SOURCE_LIMIT else None
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            cache[path] = None
    return cache[path]


def _chain(tree: ast.Module, line: int) -> Chain:
    """The statements that hold `line`, outermost first, each with the block it is in."""
    chain: Chain = []
    block: list[ast.stmt] = tree.body
    while True:
        found = next((s for s in block if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
        if found is None:
            return chain
        chain.append((found, block))
        inner: list[ast.stmt] = []
        for child in ast.iter_child_nodes(found):
            if isinstance(child, ast.stmt):
                inner.append(child)
            elif isinstance(child, (ast.ExceptHandler, ast.match_case)):
                inner.extend(child.body)
        block = inner


def _in_loop(tree: ast.Module | None, line: int) -> bool:
    return tree is not None and any(isinstance(s, _LOOPS) for s, _ in _chain(tree, line))


def _left_loop(inner: Frames, outer: Frames, cache: dict[str, ast.Module | None]) -> bool:
    """Whoever is at `outer` left a loop that whoever is at `inner` still runs: it ran it
    fewer times (it ran out of batches first).

    Both stacks (innermost first) are followed from the outermost frame to the first
    place they differ, in one function. There `outer` must wait at a statement after the
    one that holds `inner`, in the same block, and `inner` be in a loop: in that statement,
    or, when that statement is a call, in the function it called. No `if` may lie
    between: a loop entered on a condition (`if rank == 0:`) is a collective mismatch.
    """
    down, up = inner[::-1], outer[::-1]
    depth = next((i for i, (a, b) in enumerate(zip(down, up, strict=False)) if a != b), None)
    if depth is None or depth >= len(down) or depth >= len(up):
        return False
    (path, line_in, func), (other_path, line_out, other_func) = down[depth], up[depth]
    tree = _parse(path, cache)
    if tree is None or (path, func) != (other_path, other_func):
        return False
    a, b = _chain(tree, line_in), _chain(tree, line_out)
    common = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x[0] is not y[0]), None)
    if common is None:
        return False
    (held, block), (later, other_block) = a[common], b[common]
    if block != other_block or block.index(later) <= block.index(held):  # the same block
        return False
    for statement, _ in a[common:]:
        if isinstance(statement, _LOOPS):
            return True
        if isinstance(statement, (ast.If, *_SCOPES)):
            return False
    # a statement without a loop: a call, and the others still loop in what it called
    return any(_in_loop(_parse(p, cache), n) for p, n, _ in down[depth + 1 :])


LEFT = "it left the loop the others still run (fewer iterations: it ran out of data)"


def uneven_reason(groups: Sequence[Whereabouts], culprits: tuple[int, ...]) -> str | None:
    """Why the culprits and the others ran a loop a different number of times, or None.

    Every rank waits in a collective of the same count: torch sees one collective that
    the ranks call differently. When the culprits wait after the end of the loop that the
    others still run (or still run the one the others have left), they ran out of work at
    different times: uneven data, not a wrong collective.
    """
    odd = [g for g in groups if set(g.ranks) <= set(culprits)]
    rest = [g for g in groups if not set(g.ranks) & set(culprits)]
    # (a rank flagged frozen still waits where its stack says: a stale heartbeat on a busy
    # machine, or a stopped process, does not change which loop it left)
    if not odd or not rest or not all(g.waiting and g.frames for g in groups):
        return None
    if len({seq for g in groups for seq in g.seqs}) > 1:
        return None  # counts differ: "it is behind" says it
    cache: dict[str, ast.Module | None] = {}
    if all(_left_loop(o.frames, c.frames, cache) for c in odd for o in rest):
        return LEFT
    if all(_left_loop(c.frames, o.frames, cache) for c in odd for o in rest):
        return "it still runs the loop the others have left (more iterations: uneven data)"
    return None
