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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from safelaunch.diagnose.frames import LINE_PREFIX

# srun --label: the task id, right-aligned, then ": " (bounded: a long line of spaces or
# digits must not cost more than a few characters)
SRUN_LABEL = re.compile(r" {0,9}(\d{1,9}): ?")
LABELLED_SHARE = 0.5  # of the non-empty lines: more carry a label, and the file is labelled


@dataclass(frozen=True, slots=True)
class Owned:
    """One line of a combined log: whose it is, and its text without the prefixes."""

    rank: int | None  # None: a launcher's own line (or an unprefixed rank's output)
    node: int | None  # the node it came from, where a prefix says so
    text: str


def _labels(lines: Sequence[str]) -> list[re.Match[str] | None] | None:
    """Each line's srun label, when most lines carry one; None for an unlabelled log."""
    labels = [SRUN_LABEL.match(line) for line in lines]
    carried = sum(label is not None for label in labels)
    nonempty = sum(bool(line.strip()) for line in lines)
    return labels if carried > LABELLED_SHARE * nonempty else None


def _local(prefix: re.Match[str]) -> bool:
    """torchrun's role prefix (`[default0]:`): a local rank, not the global one."""
    return not prefix.group(0).startswith(("[rank", "[node"))


def _by_node(
    parsed: Sequence[tuple[int | None, re.Match[str] | None, str]],
    launchers_own: Callable[[str], bool],
) -> bool:
    """The labels are nodes (one launcher per node), not ranks (one process per rank)."""
    for task, prefix, rest in parsed:
        if task is None:
            continue
        if prefix is None:
            if launchers_own(rest):
                return True
        elif _local(prefix) or prefix["node"] is not None or int(prefix["rank"]) != task:
            return True
    return False


def _ranks_per_node(parsed: Sequence[tuple[int | None, re.Match[str] | None, str]]) -> int | None:
    """How many ranks each node ran, as far as the lines show (for local ranks)."""
    local = [int(p["rank"]) for _, p, _ in parsed if p is not None and _local(p)]
    if local:
        return max(local) + 1
    ranks: dict[int, set[int]] = {}
    for task, prefix, _ in parsed:
        if task is not None and prefix is not None:
            ranks.setdefault(task, set()).add(int(prefix["rank"]))
    return max((len(seen) for seen in ranks.values()), default=None)


def _unlabelled(lines: Sequence[str]) -> list[Owned]:
    owned = []
    for line in lines:
        prefix = LINE_PREFIX.match(line)
        if prefix is None:
            owned.append(Owned(None, None, line))
        else:
            node = prefix["node"]
            owned.append(
                Owned(int(prefix["rank"]), None if node is None else int(node), prefix["text"])
            )
    return owned


def read_lines(
    lines: Sequence[str], launchers_own: Callable[[str], bool]
) -> tuple[list[Owned], int | None]:
    """Every line's owner, and the ranks a node ran where srun labels are nodes and the
    lines show it (None otherwise: a local rank cannot be made global then).

    `launchers_own`: a launcher's own line (torchrun's log lines, safelaunch's).
    """
    labels = _labels(lines)
    if labels is None:
        return _unlabelled(lines), None
    parsed = []
    for line, label in zip(lines, labels, strict=True):
        rest = line[label.end() :] if label else line
        parsed.append((int(label[1]) if label else None, LINE_PREFIX.match(rest), rest))
    by_node = _by_node(parsed, launchers_own)
    width = _ranks_per_node(parsed) if by_node else None
    owned = []
    for task, prefix, rest in parsed:
        if prefix is None:  # the label's rank, or the node's launcher
            rank = None if by_node else task
            owned.append(Owned(rank, task if by_node else None, rest))
            continue
        rank, node = int(prefix["rank"]), prefix["node"]
        if _local(prefix) and by_node:
            if task is None or width is None:
                owned.append(Owned(None, task, rest))  # a local rank of no known node
                continue
            rank += task * width
        shown = int(node) if node is not None else (task if by_node else None)
        owned.append(Owned(rank, shown, prefix["text"]))
    return owned, width
