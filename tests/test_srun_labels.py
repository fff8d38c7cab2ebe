"""`srun --label` prefixes in a combined log: the label is a rank or a node, as the file says.

Generated jobs with the culprit known by construction: srun starting one process per rank
(the label is the rank), or one launcher per node (the label is the node; ranks carry
torch's `[rankN]:` or torchrun's local `[defaultK]:` after it), with a real Python
traceback of one rank, unlabelled SLURM lines around, and the user's own `N: ...` lines.
"""

from __future__ import annotations

import traceback
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from safelaunch.diagnose.layouts import split_combined
from safelaunch.explain import explain, judge


def _traceback() -> list[str]:
    def step(batch: list[int]) -> int:
        return batch[len(batch)]  # IndexError

    try:
        step([1, 2])
    except IndexError:
        return traceback.format_exc().splitlines()
    raise AssertionError("no traceback")


TRACEBACK = _traceback()
MODES = ("per-rank", "per-node", "per-node-local")


def _job(mode: str, nodes: int, per_node: int, culprit: int, padded: bool) -> str:
    """A .out of `nodes` x `per_node` ranks, `culprit`'s traceback half-way."""
    world = nodes * per_node
    tasks = world if mode == "per-rank" else nodes
    width = len(str(tasks - 1)) if padded else 0

    def line(rank: int, text: str) -> str:
        node, local = divmod(rank, per_node)
        if mode == "per-rank":
            return f"{rank:>{width}}: {text}"
        inner = f"[rank{rank}]:" if mode == "per-node" else f"[default{local}]:"
        return f"{node:>{width}}: {inner}{text}"

    out = ["SLURM_JOB_ID=1234", "starting at 12:00"]  # srun's own: no label
    if mode != "per-rank":
        out += [f"{n:>{width}}: safelaunch: node {n} of {nodes} (gpu-{n})" for n in range(nodes)]
    for step in range(6):
        out += [line(rank, f"step {step} loss 2.{rank:02d}") for rank in range(world)]
        if step == 3:
            out += [line(culprit, text) for text in TRACEBACK]
    out.append(line(world - 1, "3: loss 0.5"))  # the user's own `N: `, labelled by srun
    return "\n".join(out) + "\n"


@settings(max_examples=40, deadline=None)
@given(
    mode=st.sampled_from(MODES),
    nodes=st.integers(1, 4),
    per_node=st.integers(1, 4),
    data=st.data(),
    padded=st.booleans(),
)
def test_the_culprit_of_a_labelled_out_is_named_as_it_is(
    mode: str, nodes: int, per_node: int, data: st.DataObject, padded: bool
) -> None:
    culprit = data.draw(st.integers(0, nodes * per_node - 1), label="culprit")
    logs = split_combined(_job(mode, nodes, per_node, culprit, padded))
    assert {r.rank for r in logs.ranks} == set(range(nodes * per_node))
    verdict = judge(logs)
    assert verdict.root is not None and verdict.root.rank == culprit
    assert verdict.log is not None
    if mode != "per-rank" and nodes * per_node > 1:
        assert verdict.log.node == culprit // per_node  # the label, as the node
    assert "IndexError" in verdict.log.text and "step 3 loss" in verdict.log.text


def test_explain_of_a_small_srun_labelled_out_names_the_rank(tmp_path: Path) -> None:
    out = tmp_path / "slurm-1234.out"
    out.write_text(_job("per-rank", 2, 8, culprit=11, padded=True))
    text = explain(str(out))
    assert "combined log, 16 rank log(s)" in text
    assert "root cause: rank 11\n" in text and "IndexError: list index out of range" in text


def test_a_number_and_colon_in_an_unlabelled_log_is_no_rank() -> None:
    """A log whose lines mostly carry no srun label reads `3: loss 0.5` as text."""
    lines = [f"[rank{r}]:step {s}" for s in range(5) for r in range(2)]
    lines += ["3: loss 0.5", "7: lr 0.1", *(f"[rank1]:{text}" for text in TRACEBACK)]
    logs = split_combined("\n".join(lines) + "\n")
    assert {r.rank for r in logs.ranks} == {0, 1}
    verdict = judge(logs)
    assert verdict.root is not None and verdict.root.rank == 1


def test_a_label_and_a_rank_prefix_on_one_line_the_rank_prefix_wins() -> None:
    """One launcher per node: `1: [rank5]:` is rank 5 on node 1, never rank 1."""
    lines = [f"{r // 4}: [rank{r}]:step 0" for r in range(8)]
    lines += [f"1: [rank5]:{text}" for text in TRACEBACK]
    logs = split_combined("\n".join(lines) + "\n")
    verdict = judge(logs)
    assert verdict.root is not None and verdict.root.rank == 5
    assert verdict.log is not None and verdict.log.node == 1


def test_torchrun_s_local_exit_codes_under_a_node_label_are_made_global() -> None:
    """torchrun's agent line names a local rank: under node 1's label with 4 ranks a node,
    local rank 2 is rank 6 (and not rank 2 of node 0)."""
    lines = [f"{r // 4}: [default{r % 4}]:step 0" for r in range(8)]
    lines.append(
        "1: E1202 12:00:00.000 99 torch/distributed/elastic/multiprocessing/api.py:874] "
        "failed (exitcode: 1) local_rank: 2 (pid: 4321) of binary: python"
    )
    logs = split_combined("\n".join(lines) + "\n")
    codes = {r.rank: r.code for r in logs.ranks if r.code is not None}
    assert codes == {6: 1}
