"""How a list of ranks is written everywhere: `rank 3`, `ranks 0,1`, `ranks 0-3,6`.

One function, so that a label's number always agrees with the list ("ranks 0:" for one
rank was written by hand in several places).
"""

from __future__ import annotations

from collections.abc import Iterable


def ranks_label(ranks: Iterable[object]) -> str:
    """`rank N` for one, `ranks ...` for more (sorted, runs of three or more folded).

    Values read back from a file may be anything: a list that is not all integers is
    written as given.
    """
    items = list(ranks)
    numbers = [r for r in items if isinstance(r, int) and not isinstance(r, bool)]
    if len(numbers) == len(items):
        shown, count = fold(numbers), len(set(numbers))
    else:
        shown, count = ",".join(map(str, items)), len(items)
    if count == 0:
        return "no rank"
    return f"rank {shown}" if count == 1 else f"ranks {shown}"


def fold(numbers: Iterable[int]) -> str:
    """`0-3,6`: sorted, a run of three or more as first-last."""
    spans: list[list[int]] = []
    for n in sorted(set(numbers)):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(
        str(a) if a == b else f"{a},{b}" if b == a + 1 else f"{a}-{b}" for a, b in spans
    )
