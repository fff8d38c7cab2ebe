"""The culprit arbiter: generated evidence, generated divergences, two real Gloo faults."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from builders import read_report
from conftest import launch, line_of, worker

from safelaunch.diagnose.arbiter import TIERS, Item, Source, Tier, decide, headline
from safelaunch.diagnose.witnesses import (
    error_text_items,
    flight_items,
    peer_address_items,
    survivor_items,
)
from safelaunch.flights.forensics import Divergence, DivergenceKind, Forensics
from safelaunch.hangs.analysis import Whereabouts

SEEDS = range(200)


def _items(rng: random.Random, world: int) -> list[Item]:
    items = []
    for _ in range(rng.randint(0, 6)):
        ranks = tuple(sorted(rng.sample(range(world), rng.randint(0, min(3, world)))))
        items.append(
            Item(
                source=rng.choice(list(Source)),
                tier=rng.choice(TIERS),
                ranks=ranks,
                says=f"blames {ranks}",
            )
        )
    return items


@pytest.mark.parametrize("seed", SEEDS)
def test_the_strongest_tier_decides_and_disagreement_names_no_one(seed: int) -> None:
    rng = random.Random(seed)
    items = _items(rng, rng.randint(2, 16))
    verdict = decide(items)
    blaming = [i for i in items if i.ranks]
    if not blaming:
        assert verdict.culprits == () and verdict.decided_by is None
        assert headline(verdict) is None
        return
    strongest = min(TIERS.index(i.tier) for i in blaming)
    top = [i for i in blaming if TIERS.index(i.tier) == strongest]
    shared = set.intersection(*(set(i.ranks) for i in top))
    assert set(verdict.culprits) == shared
    if shared:
        assert verdict.decided_by in top
        # every weaker item is either agreeing or disagreeing, never lost
        assert len(verdict.agreeing) + len(verdict.disagreeing) == len(blaming) - 1
        assert not any(set(i.ranks) & shared for i in verdict.disagreeing)
        assert str(verdict.decided_by.source) in (headline(verdict) or "")
    else:  # the strongest evidence disagrees: no culprit, and the line says so
        assert verdict.decided_by is None
        assert "disagrees" in (headline(verdict) or "")


def _plain_divergence(calls: dict[int, str], seq: int) -> Divergence:
    """As flights/check.py's plain comparison words it: who differs from the lowest rank."""
    ranks = tuple(sorted(calls))
    reference = calls[ranks[0]]
    return Divergence(
        group="0",
        desc="default_pg",
        ranks=ranks,
        seq=seq,
        call=reference,
        kind=DivergenceKind.MISMATCH,
        missing=(),
        no_record=(),
        differ=tuple((r, c) for r, c in sorted(calls.items()) if c != reference),
        detail=None,
    )


def _forensics(*divergences: Divergence) -> Forensics:
    return Forensics(
        recorded=divergences[0].ranks,
        divergences=divergences,
        p2p=(),
        analyser="torch",
        directory=Path("/nonexistent"),
    )


@pytest.mark.parametrize("seed", range(60))
def test_a_mismatch_blames_the_minority_even_when_it_is_the_lowest_rank(seed: int) -> None:
    rng = random.Random(seed)
    world = rng.randint(2, 9)
    culprit = rng.randrange(world)  # rank 0, the comparison's reference, included
    n = rng.choice([4, 8, 1024])
    wrong = rng.choice([f"all_reduce(float32[{n + 1}])", f"all_reduce(float64[{n}])", "barrier()"])
    calls = {r: wrong if r == culprit else f"all_reduce(float32[{n}])" for r in range(world)}
    items = flight_items(_forensics(_plain_divergence(calls, rng.randint(0, 50))))
    if world == 2:  # one against one: the records cannot say which is odd
        assert items == []
        return
    assert [i.ranks for i in items] == [(culprit,)]
    assert items[0].tier == Tier.CONTENT and wrong in items[0].says


def _fingerprint(shape: int) -> str:
    return f"CollectiveFingerPrint(SequenceNumber=3, OpType=ALLREDUCE, TensorShape=[{shape}], x)"


@pytest.mark.parametrize("seed", range(40))
def test_detail_texts_are_counted_over_every_rank_that_raised_them(seed: int) -> None:
    rng = random.Random(seed)
    world = rng.randint(3, 8)
    culprit = rng.randrange(world)
    shape = {r: 5 if r == culprit else 4 for r in range(world)}
    texts = {}
    for rank in rng.sample(range(world), rng.randint(2, world)):  # not every rank raises
        other = culprit if rank != culprit else rng.choice([r for r in range(world) if r != rank])
        texts[rank] = (
            "RuntimeError: Detected mismatch between collectives on ranks. "
            f"Rank {rank} is running collective: {_fingerprint(shape[rank])}, but "
            f"Rank {other} is running collective: {_fingerprint(shape[other])}."
        )
    items = error_text_items(texts, range(world))
    seen = {int(r) for t in texts.values() for r in __import__("re").findall(r"Rank (\d+)", t)}
    if len(seen - {culprit}) >= 2:
        assert [i.ranks for i in items] == [(culprit,)]
    else:
        assert items == []  # one against one: no majority


@pytest.mark.parametrize("seed", range(30))
def test_detail_texts_of_a_subgroup_name_global_ranks(seed: int) -> None:
    """DETAIL's ranks are the group's own: mapped through the members of the group each
    raising rank's last collective ran in; without that, a text whose first rank is not
    the raising rank's own is not read (it would blame an innocent rank)."""
    rng = random.Random(seed)
    world = rng.randint(4, 8)
    members = sorted(rng.sample(range(world), rng.randint(3, world - 1)))
    culprit = rng.choice(members)
    shape = {r: 5 if r == culprit else 4 for r in members}
    texts = {}
    for rank in members:
        other = culprit if rank != culprit else rng.choice([r for r in members if r != rank])
        texts[rank] = (
            "RuntimeError: Detected mismatch between collectives on ranks. "
            f"Rank {members.index(rank)} is running collective: {_fingerprint(shape[rank])}, "
            f"but Rank {members.index(other)} is running collective: {_fingerprint(shape[other])}."
        )
    groups = dict.fromkeys(members, tuple(members))
    assert [i.ranks for i in error_text_items(texts, range(world), groups)] == [(culprit,)]
    unread = error_text_items(texts, range(world))  # no ledgers: the world's numbering
    if members != list(range(len(members))):  # not the world's numbering: nothing read
        assert unread == []


def test_a_rank_torch_names_in_a_monitored_barrier_is_behind() -> None:
    text = "RuntimeError: Ranks 1, 3 failed to pass monitoredBarrier in 10000 ms"
    (item,) = error_text_items({0: text}, range(4))
    assert item.ranks == (1, 3) and item.tier == Tier.BEHIND
    assert error_text_items({0: text}, range(2)) == []  # not this job's ranks


CASES = worker("culprit_cases.py")


def _fault(tmp_path: Path, case: str, culprit: int):
    return launch(
        tmp_path,
        "--nproc-per-node=3",
        "--hang-timeout=30",
        "--isolate=never",
        CASES,
        env={"CASE": case, "CULPRIT": str(culprit)},
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "source", "line"),
    [("size", "flight-record", "dist.all_reduce(batch)"), ("sleep", "flight-record", "time.sleep")],
)
def test_the_culprit_is_named_though_a_peer_failed_first(
    tmp_path: Path, case: str, source: str, line: str
) -> None:
    culprit = random.Random(case).randrange(3)
    run = _fault(tmp_path, case, culprit)
    report = read_report(run.attempt())
    diagnosis = report["diagnosis"]
    assert [c["rank"] for c in diagnosis["culprits"]] == [culprit], run.stderr
    (named,) = diagnosis["culprits"]
    assert named["decided_by"]["source"] == source
    place = f"{CASES}:{line_of(CASES, line)}"  # "in func" where a stack said it
    assert named["location"] == place or named["location"].startswith(f"{place} "), named
    assert diagnosis["root_cause_rank"] == culprit
    assert f"FAILED: rank {culprit} " in run.stderr
    first = report["first_failure"]
    if first != culprit:  # the first to fail is shown, as weaker evidence
        assert any(d["ranks"] == [first] for d in diagnosis["disagreeing"]), diagnosis
        assert f"blames rank {first} instead" in run.stderr
    assert run.returncode != 0


@pytest.mark.parametrize("seed", range(20))
def test_a_stack_snapshot_does_not_pick_one_of_ranks_the_ledgers_found_tied(seed: int) -> None:
    """Ledgers that found two ranks tied ("one of these") at a tier outrank a stack
    snapshot of that tier naming one of them (a DDP rank in backward looked "not in a
    collective"), not a source that knows more, nor one naming another rank."""
    rng = random.Random(seed)
    world = rng.randint(2, 8)
    tied = tuple(sorted(rng.sample(range(world), 2)))
    tier = rng.choice([Tier.CONTENT, Tier.BEHIND])
    tie = Item(source=Source.CALL_LEDGER, tier=tier, ranks=tied, says="t", ambiguous=True)
    one = (rng.choice(tied),)
    stacks = Item(source=Source.STACKS, tier=tier, ranks=one, says="s")
    assert decide([tie, stacks]).culprits == ()
    flight = Item(source=Source.FLIGHT_RECORD, tier=tier, ranks=one, says="f")
    assert decide([tie, flight]).culprits == one
    others = [r for r in range(world) if r not in tied]
    if others:
        elsewhere = Item(source=Source.STACKS, tier=tier, ranks=(others[0],), says="e")
        assert decide([tie, elsewhere]).culprits == (others[0],)


@pytest.mark.parametrize("seed", range(40))
def test_ranks_that_failed_inside_a_call_count_as_waiting_for_the_one_elsewhere(
    seed: int,
) -> None:
    """A pipeline's waiting stages often all time out before the survivors' snapshot: the
    snapshot then holds only the rank elsewhere (computing, holding the GIL). The failed
    ranks that stopped inside a call (their ledgers) waited too: against them the rank
    elsewhere is a minority, as against survivors waiting."""
    rng = random.Random(seed)
    world = rng.randint(2, 8)
    late = rng.randrange(world)
    others = [r for r in range(world) if r != late]
    failed = rng.sample(others, rng.randint(1, len(others)))
    waiting = [
        Whereabouts(
            ranks=(r,), activity="ar", location="t.py:9", waiting=True, seqs=(3,), frozen=None
        )
        for r in others
        if r not in failed
    ]
    busy = Whereabouts(
        ranks=(late,), activity="decode", location="h.py:21", waiting=False, seqs=(2,),
        frozen=None, frames=(("h.py", 21, "decode"),),
    )  # fmt: skip
    survivors = [*waiting, busy]
    first = Item(source=Source.FIRST_FAILURE, tier=Tier.FIRST_FAILURE, ranks=(failed[0],),
                 says="timed out")  # fmt: skip
    items = survivor_items(survivors, first, {}, failed)
    if world > 2:
        [item] = items
        assert item.ranks == (late,) and item.tier == Tier.BEHIND
        assert item.klass is None  # its own code, not a dataset's: the timeout's class
        assert decide([first, *items]).culprits == (late,)
    else:  # one against one: the count alone does not single it out
        assert items == []
    alive_waiting = len(others) - len(failed)  # without the failed ones: these alone
    assert survivor_items(survivors, first, {}, ()) == (items if alive_waiting > 1 else [])
    own = Item(source=Source.FIRST_FAILURE, tier=Tier.OWN_ERROR, ranks=(failed[0],), says="x")
    assert survivor_items(survivors, own, {}, failed) == []  # beside an error of its own


def test_a_rank_elsewhere_inside_a_dataset_method_is_data_sampling() -> None:
    waiting = [
        Whereabouts(
            ranks=(r,), activity="ar", location="t.py:9", waiting=True, seqs=(3,), frozen=None
        )
        for r in (0, 1)
    ]
    reading = Whereabouts(
        ranks=(2,), activity="read", location="t.py:50", waiting=False, seqs=(2,),
        frozen=None, frames=(("t.py", 50, "__getitem__"), ("t.py", 67, "next_batch")),
    )  # fmt: skip
    first = Item(source=Source.FIRST_FAILURE, tier=Tier.FIRST_FAILURE, ranks=(0,), says="x")
    [item] = survivor_items([*waiting, reading], first, {}, ())
    assert (item.ranks, item.klass) == ((2,), "data/sampling")


@pytest.mark.parametrize("code", [0, 7])
def test_a_hang_s_rank_that_left_is_placed_by_its_exit_record(code: int) -> None:
    """A rank that ended (sys.exit, os._exit) while the others hang: the hang names it,
    its exit record says where it left, and the class: a clean end is data/sampling (its
    loop ended first), a code of its own no class."""
    from safelaunch.diagnose.leaving import Leave, LeaveHow
    from safelaunch.diagnose.witnesses import exit_items
    from safelaunch.hangs.analysis import HangAnalysis

    hang = HangAnalysis(
        stuck_for=9.0, timeout=3.0, groups=(), exited=((2, f"exited with code {code}"),),
        culprits=(2,), reason="rank 2 exited while the others still wait for it",
        stacks_dir=None,
    )  # fmt: skip
    leave = Leave(rank=2, how=LeaveHow.HARD_EXIT, code=code, location="t.py:108 in train",
                  seq=14)  # fmt: skip
    [item] = exit_items(hang, {2: leave})
    assert (item.ranks, item.tier, item.location) == ((2,), Tier.OWN_ERROR, "t.py:108 in train")
    assert item.klass == ("data/sampling" if code == 0 else None)
    assert f"os._exit({code})" in item.says
    assert exit_items(hang, {}) == [] and exit_items(None, {2: leave}) == []


def _closed(port: int, read: bool = False) -> str:
    if read:  # Gloo's other text for a lost peer
        return f"RuntimeError: [pair.cc:537] Read error [127.0.0.1]:{port}: Connection reset"
    return f"RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:{port}. This is"


@pytest.mark.parametrize("seed", range(40))
def test_a_closed_connection_names_where_its_chain_starts_or_nobody(
    tmp_path: Path, seed: int
) -> None:
    """Ranks that lost a peer, each text naming the port of the rank it lost (drawn): the
    rank named is the one at the chain's start, whose own text names no closed peer. A
    chain that leaves the recorded ranks (the first to go ran on another node) names no
    one, even where a rank here lost its connection too."""
    import json

    rng = random.Random(seed)
    here = rng.sample(range(16), rng.randint(2, 5))
    first = rng.choice([*here, None])  # None: the first to go ran elsewhere
    port = {rank: 20000 + 7 * rank for rank in range(16)}  # not a byte-swapped palindrome
    for rank in here:
        record = {"requested": "gloo", "used": "gloo", "addresses": [["0.0.0.0", port[rank]]]}
        (tmp_path / f"rank{rank}.comm.json").write_text(json.dumps(record))
    elsewhere = next(r for r in range(16) if r not in here)
    texts = {}
    for rank in here:
        if rank == first:
            texts[rank] = "ValueError: it broke" if rng.random() < 0.5 else ""
            continue
        # each lost the first, or one that itself lost it (a chain), drawn
        lost = rng.choice([r for r in here if r != rank and r != first] or [first])
        lost = first if first is not None and rng.random() < 0.5 else lost
        texts[rank] = _closed(port[lost if lost is not None else elsewhere], rng.random() < 0.3)
    items = peer_address_items(texts, tmp_path)
    named = {r for item in items for r in item.ranks}
    assert named <= ({first} if first is not None else set()), (here, first, texts)
    if first is not None and all(_leads_to(r, first, texts, port) for r in texts if r != first):
        assert named == {first}


def _leads_to(rank: int, first: int, texts: dict[int, str], port: dict[int, int]) -> bool:
    owner = {f"]:{p}{end}": r for r, p in port.items() for end in ".:"}
    seen = set()
    while rank != first and rank not in seen:
        seen.add(rank)
        rank = next((r for key, r in owner.items() if key in texts.get(rank, "")), -1)
        if rank not in texts:
            return rank == first
    return rank == first
