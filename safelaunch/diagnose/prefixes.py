"""Whose line it is in a combined log (a SLURM .out): the prefixes before each line.

Rank prefixes (frames.LINE_PREFIX): torch's `[rank3]:`, safelaunch's `[node1/rank3]:`,
torchrun's role prefix `[default0]:` (a local rank). `srun --label` puts the SLURM task
id before all of that (`3: `, right-aligned in a column as wide as the largest id), and
that id means one of two things:
- srun started one process per rank: the id is the rank;
- srun started one launcher per node (torchrun or safelaunch): the id is the node, and
  a rank's line carries its rank prefix after it; a line without one is that node's
  launcher's own (or its ranks' output when torchrun ran without --tee).
The file says which: a rank prefix naming another rank than its label, a local-rank or
safelaunch node prefix, or a launcher's own line under a label, and the labels are nodes.
Where a line carries both, the rank prefix wins. Whether the file is srun-labelled at
all is decided over the whole file (most lines carry a label), so that a user's own
`3: loss 0.5` in an unlabelled log is never read as rank 3's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

from safelaunch.diagnose.frames import LINE_PREFIX

# srun --label: the task id, right-aligned, then ": " (bounded: a long line of spaces or
# digits must not cost more than a few characters)
SRUN_LABEL = re.compile(r" {0,9}(\d{1,9}): ?")
LABELLED_SHARE = 0.5  # of the non-empty lines: more carry a label, and the file is labelled
SAMPLE = 4096  # lines looked at, evenly spread, to decide that (a 1 GB log: ~250,000)
# LINE_PREFIX without the text: the rest of the line is sliced, not captured again
_RANK_PREFIX = re.compile(LINE_PREFIX.pattern.split("(?P<text>")[0])
# A labelled log's line in one match: the label, then a rank prefix, each where present
_LABELLED = re.compile(
    rf"(?:{SRUN_LABEL.pattern})?(?P<prefix>{_RANK_PREFIX.pattern.removeprefix('^')})?"
)

# One line of a combined log: its rank (None: a launcher's own line, or an unprefixed
# rank's output), the node it came from where a prefix says so, its text without prefixes.
Owned = tuple[int | None, int | None, str]
# A labelled log's line before the file says what its labels are: (label, rank prefix's
# rank, its node, whether it is torchrun's local `[defaultK]:`, the line, where the text
# after the label begins, where the text after the rank prefix begins)
_Parsed = tuple[int | None, int | None, int | None, bool, str, int, int]


def _labelled(lines: Sequence[str]) -> bool:
    """Most lines carry srun's label (looked at in an even sample of the file)."""
    sample = lines[:: max(1, len(lines) // SAMPLE)]
    nonempty = [line for line in sample if line.strip()]
    carried = sum(SRUN_LABEL.match(line) is not None for line in nonempty)
    return carried > LABELLED_SHARE * len(nonempty)


def _parse(lines: Sequence[str]) -> list[_Parsed]:
    parsed: list[_Parsed] = []
    for line in lines:
        found = _LABELLED.match(line)  # always: every part is optional
        assert found is not None
        task, rank, node = found[1], found["rank"], found["node"]
        start = found.start("prefix") if rank is not None else found.end()
        parsed.append(
            (
                None if task is None else int(task),
                None if rank is None else int(rank),
                None if node is None else int(node),
                rank is not None and not line.startswith(("[rank", "[node"), start),
                line,
                start,
                found.end(),
            )
        )
    return parsed


def _by_node(parsed: Sequence[_Parsed], launchers_own: Callable[[str], bool]) -> bool:
    """The labels are nodes (one launcher per node), not ranks (one process per rank)."""
    for task, rank, node, local, line, start, _ in parsed:
        if task is None:
            continue
        if rank is None:
            if launchers_own(line[start:]):
                return True
        elif local or node is not None or rank != task:
            return True
    return False


def _ranks_per_node(parsed: Sequence[_Parsed]) -> int | None:
    """How many ranks each node ran, as far as the lines show (for local ranks)."""
    local = [rank for _, rank, _, is_local, *_ in parsed if rank is not None and is_local]
    if local:
        return max(local) + 1
    ranks: dict[int, set[int]] = {}
    for task, rank, *_ in parsed:
        if task is not None and rank is not None:
            ranks.setdefault(task, set()).add(rank)
    return max((len(seen) for seen in ranks.values()), default=None)


def _unlabelled(lines: Sequence[str]) -> Iterator[Owned]:
    for line in lines:
        prefix = _RANK_PREFIX.match(line)
        if prefix is None:
            yield None, None, line
        else:
            node = prefix["node"]
            yield int(prefix["rank"]), None if node is None else int(node), line[prefix.end() :]


def _owners(parsed: Sequence[_Parsed], by_node: bool, width: int | None) -> Iterator[Owned]:
    for task, rank, node, local, line, start, cut in parsed:
        if rank is None:  # the label's rank, or the node's launcher
            yield (None, task, line[start:]) if by_node else (task, None, line[start:])
            continue
        if local and by_node:
            if task is None or width is None:
                yield None, task, line[start:]  # a local rank of no known node
                continue
            rank += task * width
        yield rank, node if node is not None else (task if by_node else None), line[cut:]


def read_lines(
    text: str, launchers_own: Callable[[str], bool]
) -> tuple[Iterator[Owned], int | None]:
    """Every line's owner, in order, and the ranks a node ran where srun labels are nodes
    and the lines show it (None otherwise: a local rank cannot be made global then).

    `launchers_own`: a launcher's own line (torchrun's log lines, safelaunch's).
    """
    lines = text.splitlines()
    if not _labelled(lines):
        return _unlabelled(lines), None
    parsed = _parse(lines)
    by_node = _by_node(parsed, launchers_own)
    width = _ranks_per_node(parsed) if by_node else None
    return _owners(parsed, by_node, width), width
