"""Collective forensics: where the ranks' flight records diverge, joined with where each rank is.

The records are compared by safelaunch.flights.check in a subprocess (it imports torch,
which the launcher never does). This module runs it, reads its JSON, and words the
findings: "group [1,2] (pg 1), collective #3 all_reduce(float32[1024]): rank 2 never
called it; rank 2 is in train.py:88 in load_shard".
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from safelaunch.diagnose import jsonshape as js
from safelaunch.hangs.analysis import HangAnalysis
from safelaunch.outcome import Outcome
from safelaunch.ranktext import ranks_label
from safelaunch.rundir import flight_file
from safelaunch.supervisor.signals import stop_requested
from safelaunch.vocab import StrEnum, Word, word_of

FLIGHTCHECK_TIMEOUT = 60.0  # importing torch takes seconds on a loaded machine


class DivergenceKind(StrEnum):
    """How a group's members differ at a collective (flights/check.py writes these words)."""

    MISSING = "missing"  # some members never called it
    MISMATCH = "mismatch"  # some called something else
    UNRECORDED = "unrecorded"  # some left no record


class WaitKind(StrEnum):
    """Why point-to-point calls cannot complete (flights/check.py writes these words)."""

    SEND_SEND = "send/send"
    RECV_RECV = "recv/recv"
    UNANSWERED = "unanswered"


@dataclass(frozen=True, slots=True, kw_only=True)
class Divergence:
    """The first collective of one process group that its members did not all call alike."""

    group: str  # torch's group name ("0" is the default group)
    desc: str | None
    ranks: tuple[int, ...]  # the group's members (global ranks)
    seq: int  # the collective's number within the group
    call: str  # all_reduce(float32[1024])
    kind: DivergenceKind
    missing: tuple[int, ...]  # members whose record lacks it
    no_record: tuple[int, ...]  # members that left no record
    differ: tuple[tuple[int, str], ...]  # members that called something else, and what
    detail: str | None  # torch's analyser's own words on a mismatch


@dataclass(frozen=True, slots=True, kw_only=True)
class P2PWait:
    """Point-to-point calls that cannot complete: both sides send (or receive), or no answer."""

    ranks: tuple[int, int]
    kind: WaitKind
    calls: tuple[tuple[int, str], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Forensics:
    """What the flight records show."""

    recorded: tuple[int, ...]  # ranks that left a record
    divergences: tuple[Divergence, ...]
    p2p: tuple[P2PWait, ...]
    analyser: str  # "torch" or why the plain comparison was used
    directory: Path
    where: tuple[tuple[int, str], ...] = ()  # rank -> where it was (the stack verdict)
    compared: tuple[int, ...] | None = None  # ranks with collectives to compare (None: all)
    unnamed: int = 0  # collectives of groups without known members: not compared
    error: str | None = None  # why torch's analyser refused the records
    unread: tuple[tuple[int, str], ...] = ()  # rank -> "empty" / "unreadable": a file, no record


_RANKS = js.Arr(js.INT)
# flightcheck's JSON, as parse reads it: it carries what the records held (any file found
# below a directory explain was given), so it is checked as every record explain reads is
FLIGHTCHECK = js.Obj(
    {
        "ranks": _RANKS,
        "compared": _RANKS,
        "unnamed": js.INT,
        "divergences": js.Arr(
            js.Obj(
                {
                    "ranks": _RANKS,
                    "seq": js.INT,
                    "missing": _RANKS,
                    "no_record": _RANKS,
                    "differ": js.Map(js.STR),
                    "desc": js.OPT_STR,
                    "detail": js.OPT_STR,
                }
            )
        ),
        "p2p": js.Arr(js.Obj({"ranks": js.Row((js.INT, js.INT)), "calls": js.Map(js.STR)})),
    }
)


def run_flightcheck(paths: list[Path]) -> dict[str, Any] | None:
    """safelaunch.flights.check's JSON; None when it could not run (no torch, crash, timeout)."""
    try:
        with tempfile.TemporaryFile() as output:
            check = subprocess.Popen(
                [sys.executable, "-m", "safelaunch.flights.check", *map(str, paths)],
                stdout=output,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + FLIGHTCHECK_TIMEOUT
            # Polled: importing torch takes seconds, and a Ctrl-C must not wait for it.
            while check.poll() is None:
                if stop_requested() or time.monotonic() > deadline:
                    check.kill()
                    check.wait()
                    return None
                time.sleep(0.05)
            output.seek(0)
            result = json.loads(output.read())
    except (OSError, ValueError, RecursionError):
        return None
    fits = isinstance(result, dict) and js.mismatch(result, FLIGHTCHECK) is None
    return result if fits else None


def _word(value: object, words: type[Word]) -> Word:
    """A closed vocabulary's word from flightcheck's JSON (our own subprocess's)."""
    word = word_of(str(value), words)
    if word is None:
        raise KeyError(f"{value!r} is not one of {tuple(map(str, words))}")
    return word


def parse(result: Mapping[str, Any], directory: Path) -> Forensics:
    """The subprocess's JSON as records (a word it does not know: KeyError, as a missing key)."""
    divergences = tuple(
        Divergence(
            group=str(d["group"]),
            desc=d.get("desc"),
            ranks=tuple(d["ranks"]),
            seq=int(d["seq"]),
            call=str(d["call"]),
            kind=_word(d["kind"], DivergenceKind),
            missing=tuple(d["missing"]),
            no_record=tuple(d["no_record"]),
            differ=tuple((int(r), str(c)) for r, c in d["differ"].items()),
            detail=d.get("detail"),
        )
        for d in result.get("divergences", [])
    )
    waits = tuple(
        P2PWait(
            ranks=(int(w["ranks"][0]), int(w["ranks"][1])),
            kind=_word(w["kind"], WaitKind),
            calls=tuple((int(r), str(c)) for r, c in w["calls"].items()),
        )
        for w in result.get("p2p", [])
    )
    error = result.get("analyser_error")
    compared = result.get("compared")
    return Forensics(
        recorded=tuple(result.get("ranks", [])),
        divergences=divergences,
        p2p=waits,
        analyser=f"plain comparison (torch's analyser: {error})" if error else "torch",
        directory=directory,
        compared=None if compared is None else tuple(int(r) for r in compared),
        unnamed=int(result.get("unnamed", 0)),
        error=None if error is None else str(error),
    )


def examine(files: list[Path], where: Mapping[int, str], directory: Path) -> Forensics | None:
    """Compare the flight records in `files`; None when there are none."""
    if not files:
        return None
    result = run_flightcheck(files)
    if result is None or not result.get("ranks"):
        return None
    found = parse(result, directory)
    return replace(
        found, where=tuple(sorted(where.items())), unread=unread(files, set(found.recorded))
    )


_OUR_RECORD = re.compile(r"^rank(\d+)\.json$")  # flight/rank<N>.json


def unread(files: list[Path], recorded: set[int]) -> tuple[tuple[int, str], ...]:
    """Ranks whose record file is there but gave no record: empty, or unreadable."""
    found: dict[int, str] = {}
    for path in files:
        named = _OUR_RECORD.match(path.name) or (
            None if path.suffix else re.search(r"(\d+)$", path.name)
        )
        if named is None or int(named[1]) in recorded:
            continue
        try:
            empty = path.stat().st_size == 0
        except OSError:
            continue
        found.setdefault(int(named[1]), "empty" if empty else "unreadable")
    return tuple(sorted(found.items()))


def whereabouts(outcome: Outcome, hang: HangAnalysis | None) -> dict[int, str]:
    """Where each rank was, from the stack verdict (a hang) or how it ended."""
    where = {r.rank: r.how_it_ended() for r in outcome.ranks if r.state not in ("stopped",)}
    if hang is not None:
        for group in hang.groups:
            verb = "waits in" if group.waiting else "is in"
            text = f"{verb} {group.activity}" + (f" ({group.location})" if group.location else "")
            where.update(dict.fromkeys(group.ranks, text))
        where.update(dict(hang.exited))
    return where


def for_attempt(outcome: Outcome, hang: HangAnalysis | None) -> Forensics | None:
    """The attempt's flight records, compared and joined with the stack verdict."""
    directory = flight_file.directory(outcome.attempt_dir)
    files = flight_file.record_files(outcome.attempt_dir)
    return examine(files, whereabouts(outcome, hang), directory)


def _group(d: Divergence) -> str:
    name = "default group" if d.desc == "default_pg" else f"pg {d.group}"
    return f"group [{','.join(map(str, d.ranks))}] ({name})"


def divergence_line(d: Divergence, where: Mapping[int, str]) -> str:
    """One finding, joined with where the ranks it names are."""
    head = f"{_group(d)}, collective #{d.seq} {d.call}"
    told = _named(d)
    if d.kind == DivergenceKind.MISSING:
        what = f"{ranks_label(d.missing)} never called it"
    elif d.kind == DivergenceKind.MISMATCH:
        what = "; ".join(f"rank {r} called {c} instead" for r, c in d.differ) or "calls differ"
        if not d.differ and d.detail:
            what = d.detail
    else:
        what = f"still in flight; {ranks_label(d.no_record)} left no flight record"
    places = [f"rank {r} {where[r]}" for r in told if r in where]
    return f"{head}: {what}" + (f"; {'; '.join(places)}" if places else "")


def _named(d: Divergence) -> tuple[int, ...]:
    """The ranks a finding points at."""
    if d.kind == DivergenceKind.MISSING:
        return d.missing
    return tuple(r for r, _ in d.differ) if d.kind == DivergenceKind.MISMATCH else d.no_record


def leads_first(divergences: tuple[Divergence, ...], where: Mapping[int, str]) -> list[Divergence]:
    """Findings naming a rank outside any collective first: the others wait because of it."""

    def outside(d: Divergence) -> bool:
        return all(where.get(r, "").startswith("is in") for r in _named(d))

    return sorted(divergences, key=lambda d: (not outside(d), len(_named(d))))


def p2p_line(w: P2PWait) -> str:
    """One p2p finding."""
    calls = "; ".join(f"rank {r} {c}" for r, c in w.calls)
    if w.kind == WaitKind.UNANSWERED:
        return f"p2p: {calls}: rank {w.ranks[1]} has no matching call in flight"
    return f"p2p deadlock ({w.kind}): ranks {w.ranks[0]},{w.ranks[1]} wait on each other: {calls}"


def lines(forensics: Forensics) -> list[str]:
    """The summary's lines: every divergence and p2p wait, else what the comparison saw.

    "agree" only where two or more ranks' collectives were compared by torch's analyser:
    one record has nothing to agree with, and a refused analysis is no agreement.
    """
    where = dict(forensics.where)
    found = [divergence_line(d, where) for d in leads_first(forensics.divergences, where)]
    found.extend(p2p_line(w) for w in forensics.p2p)
    return found or [nothing_found(forensics)]


def nothing_found(forensics: Forensics) -> str:
    """What the records show when they show no divergence."""
    compared = forensics.recorded if forensics.compared is None else forensics.compared
    unnamed = (
        f"; {forensics.unnamed} collective(s) of process groups without known members "
        "(unnamed, as Gloo records them under TORCH_DISTRIBUTED_DEBUG=DETAIL) not compared"
        if forensics.unnamed
        else ""
    )
    if not compared:
        return f"no flight record holds a collective to compare{unnamed}"
    if len(compared) == 1:
        return f"{_alone(forensics, compared[0])}: nothing to compare it with{unnamed}"
    if forensics.error:
        return (
            f"could not be compared by torch's analyser ({forensics.error}); a plain "
            f"comparison of {ranks_label(compared)} found no collective where they diverge{unnamed}"
        )
    return f"the ranks' flight records agree (no collective where they diverge){unnamed}"


def _alone(forensics: Forensics, rank: int) -> str:
    """One rank's record holds collectives: what the others' files were."""
    others = sorted(set(forensics.recorded) - {rank})
    notes = [f"{ranks_label(others)}: none"] if others else []
    notes += [
        f"rank {r}'s is empty" if how == "empty" else f"rank {r}'s could not be read"
        for r, how in forensics.unread
    ]
    if others:
        head = f"only rank {rank}'s flight record holds collectives"
    elif forensics.unread:
        head = f"only rank {rank}'s flight record could be read"
    else:
        head = f"only rank {rank} left a flight record"
    return head + (f" ({'; '.join(notes)})" if notes else "")


def record(forensics: Forensics | None) -> dict[str, Any] | None:
    """report.json's `collectives`."""
    if forensics is None:
        return None
    where = dict(forensics.where)
    return {
        "records_dir": str(forensics.directory),
        "recorded_ranks": list(forensics.recorded),
        "analyser": forensics.analyser,
        "divergences": [
            {
                "group": d.group,
                "desc": d.desc,
                "ranks": list(d.ranks),
                "seq": d.seq,
                "call": d.call,
                "kind": d.kind,
                "missing": list(d.missing),
                "no_record": list(d.no_record),
                "differ": [{"rank": r, "call": c} for r, c in d.differ],
                "detail": d.detail,
                "summary": divergence_line(d, where),
            }
            for d in leads_first(forensics.divergences, where)
        ],
        "p2p": [
            {
                "ranks": list(w.ranks),
                "kind": w.kind,
                "calls": [{"rank": r, "call": c} for r, c in w.calls],
                "summary": p2p_line(w),
            }
            for w in forensics.p2p
        ],
    }
