"""The call ledger: `<attempt>/rank<N>.calls.log`, every torch.distributed call of a rank.

Written in every run by the rank's hooks (safelaunch/rank/call_ledger.py), one write(2)
a line, so that it survives the abort a mismatch often ends in and the SIGKILL of a
teardown. Tab-separated lines, by their first field:

- `G  group  ranks  desc`: a process group this rank is a member of, its members as
  global ranks (`0,1,3`), written when init_process_group / new_group created it.
- `C  n  mode  group  count  op  what  where  seq`: collective call number `n` of the
  rank (over all its calls), the rank's `count`-th Python-level collective in `group`;
  `what` is `dtype[shape]` (and the reduce op), `where` the user's `file:line`; `seq`
  torch's count of the ops the group had issued before it (its collectives from C++,
  DDP's, and its p2p calls included; empty where the backend has none). Lines without
  `seq` (written before it existed) are read as well.
- `P  n  mode  group  op  peer  tag  what  where  seq`: a point-to-point call; `peer`
  the GLOBAL rank it sends to or receives from (`*`: any source); `seq` as a
  collective's (torch counts p2p calls among the group's ops).
- `D  n`: call n returned (blocking), or its work was seen completed (async: polled at
  the rank's next call and when the launcher asks for the flight record). A blocking
  call without its `D`, or an async one without it and no blocking call after it, is
  where the rank still is, or where it stopped: a call that raised has no `D` either.
- `!  text`: a note (the cap below).

mode is `b` (blocking) or `a` (async_op / isend / irecv / batch_isend_irecv). Collectives
DDP's reducer issues from C++ are not Python calls and are not in the ledger.

Bounded: after LIMIT lines the file is renamed to `rank<N>.calls.old.log` (replacing an
older one) and a new one starts with the groups again, so a rank keeps at most 2 x LIMIT
lines, the newest ones: what it was doing when it stopped is at the end.
"""

from __future__ import annotations

import os

from safelaunch.rundir.frozen import Record
from safelaunch.rundir.layout import rank_files

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path
    from typing import Any

SUFFIX = ".calls.log"
OLD_SUFFIX = ".calls.old.log"
LIMIT = 200_000  # lines per file (~20 MB); the newest LIMIT..2 x LIMIT lines are kept
ANY = "*"


class CallKind:
    """A ledger line's two kinds of call: plain strs, as every record the rank writes
    (enum is no import of the rank's: rundir/frozen.py)."""

    COLLECTIVE = "collective"
    P2P = "p2p"


class Group(Record):
    """A process group as one member saw it created."""

    name: str  # torch's group name ("0" is the default group), the same on every member
    ranks: tuple[int, ...]  # its members, global ranks, ascending
    desc: str = ""


class Call(Record):
    """One call a rank made, and how far it got."""

    n: int  # the rank's call number (all kinds, all groups)
    kind: str  # CallKind's
    op: str  # all_reduce, broadcast, send, recv, ...
    group: str  # torch's group name
    count: int | None = None  # collectives: the rank's count-th collective in `group`
    seq: int | None = None  # torch's count of the group's ops issued before it
    peer: int | None = None  # p2p: the peer's global rank (None: any source)
    tag: int = 0
    what: str = ""  # dtype[shape] (and reduce op)
    where: str = ""  # the user's file:line
    blocking: bool = True
    done: bool = False  # it returned (blocking) or its work completed (async)
    # The rank is (or was, when it stopped) waiting for it: not done, and, if async, no
    # blocking call came after it (a rank waits on its isend/irecv before going on).
    blocked: bool = False

    def signature(self) -> tuple[str, str]:
        return self.op, self.what

    def shown(self) -> str:
        at = f" at {self.where}" if self.where else ""
        if self.kind == CallKind.P2P:
            peer = "any rank" if self.peer is None else f"rank {self.peer}"
            way = "to" if self.op.endswith("send") else "from"
            return f"{self.op} {self.what} {way} {peer}{at}"
        return f"{self.op} #{self.count} {self.what}{at}".replace("  ", " ")


class CallLedger(Record):
    rank: int
    groups: tuple[Group, ...]
    calls: tuple[Call, ...]  # by call number
    truncated: bool = False  # the cap dropped its oldest calls: numbering starts past 1

    def group(self, name: str) -> Group | None:
        return next((g for g in self.groups if g.name == name), None)


def name(rank: int | str) -> str:
    return f"rank{rank}{SUFFIX}"


def path(attempt_dir: Path, rank: int) -> Path:
    return attempt_dir / name(rank)


class CallsWriter:
    """The rank's side: one os.write per line, appended (threads never interleave a line)."""

    def __init__(self, path: str, limit: int = LIMIT) -> None:
        self._path = path
        self._limit = limit
        self._lines = 0
        self._groups: list[str] = []
        self._fd = self._open()

    def _open(self) -> int:
        return os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def group(self, group: str, ranks: Iterable[int], desc: str) -> None:
        line = f"G\t{group}\t{','.join(str(r) for r in ranks)}\t{_clean(desc)}\n"
        self._groups.append(line)
        self._write(line)

    def collective(
        self,
        n: int,
        blocking: bool,
        group: str,
        count: int,
        op: str,
        what: str,
        where: str,
        seq: int | None = None,
    ) -> None:
        mode = "b" if blocking else "a"
        shown = "" if seq is None else str(seq)
        self._write(
            f"C\t{n}\t{mode}\t{group}\t{count}\t{op}\t{_clean(what)}\t{_clean(where)}\t{shown}\n"
        )

    def p2p(
        self,
        n: int,
        blocking: bool,
        group: str,
        op: str,
        peer: int | None,
        tag: int,
        what: str,
        where: str,
        seq: int | None = None,
    ) -> None:
        mode = "b" if blocking else "a"
        shown = ANY if peer is None else str(peer)
        counted = "" if seq is None else str(seq)
        self._write(
            f"P\t{n}\t{mode}\t{group}\t{op}\t{shown}\t{tag}\t{_clean(what)}\t{_clean(where)}"
            f"\t{counted}\n"
        )

    def done(self, n: int) -> None:
        self._write(f"D\t{n}\n")

    def _write(self, line: str) -> None:
        if self._lines >= self._limit:
            self._rotate()
        self._lines += 1
        os.write(self._fd, line.encode())

    def _rotate(self) -> None:
        """Keep the newest lines: this file becomes the old one, a new one starts."""
        os.write(self._fd, f"!\tcontinued after {self._lines} lines\n".encode())
        os.replace(self._path, self._path[: -len(SUFFIX)] + OLD_SUFFIX)
        os.close(self._fd)
        self._fd = self._open()
        self._lines = 0
        for line in list(self._groups):
            self._lines += 1
            os.write(self._fd, line.encode())


def _clean(text: str) -> str:
    return text.replace("\t", " ").replace("\n", " ")


def read_all(attempt_dir: Path) -> dict[int, CallLedger]:
    """Every rank's ledger in the attempt, by rank (the older file first where rotated)."""
    found = {}
    for rank, current in rank_files(attempt_dir, SUFFIX):
        lines: list[str] = []
        old = current.with_name(current.name[: -len(SUFFIX)] + OLD_SUFFIX)
        for part in (old, current):
            try:
                lines += part.read_text(errors="replace").splitlines()
            except OSError:
                continue
        found[rank] = parse(rank, lines)
    return found


def parse(rank: int, lines: Iterable[str]) -> CallLedger:
    """The ledger the lines say; malformed lines (a torn last one) are left out."""
    groups: dict[str, Group] = {}
    calls: dict[int, dict[str, Any]] = {}
    done: set[int] = set()
    notes = False
    for line in lines:
        fields = line.split("\t")
        try:
            kind = fields[0]
            if kind == "G" and len(fields) >= 3:
                ranks = tuple(sorted(int(r) for r in fields[2].split(",") if r))
                desc = fields[3] if len(fields) > 3 else ""
                groups[fields[1]] = Group(name=fields[1], ranks=ranks, desc=desc)
            elif kind == "C" and len(fields) in (8, 9):
                calls[int(fields[1])] = _collective(fields)
            elif kind == "P" and len(fields) in (9, 10):
                calls[int(fields[1])] = _p2p(fields)
            elif kind == "D" and len(fields) == 2:
                done.add(int(fields[1]))
            elif kind == "!":
                notes = True
        except ValueError:
            continue
    last_blocking = max((n for n, f in calls.items() if f["blocking"]), default=0)
    kept = tuple(
        Call(
            n=n,
            done=n in done,
            blocked=n not in done and (bool(fields["blocking"]) or n > last_blocking),
            **fields,
        )
        for n, fields in sorted(calls.items())
    )
    dropped = notes and (not kept or kept[0].n > 1)  # one rotation keeps every line
    return CallLedger(rank=rank, groups=tuple(groups.values()), calls=kept, truncated=dropped)


def _collective(fields: list[str]) -> dict[str, Any]:
    _, _, mode, group, count, op, what, where, *rest = fields
    seq = rest[0] if rest else ""
    return {
        "seq": int(seq) if seq else None,
        "kind": CallKind.COLLECTIVE,
        "blocking": mode == "b",
        "group": group,
        "count": int(count),
        "op": op,
        "what": what,
        "where": where,
    }


def _p2p(fields: list[str]) -> dict[str, Any]:
    _, _, mode, group, op, peer, tag, what, where, *rest = fields
    seq = rest[0] if rest else ""
    return {
        "seq": int(seq) if seq else None,
        "kind": CallKind.P2P,
        "blocking": mode == "b",
        "group": group,
        "op": op,
        "peer": None if peer == ANY else int(peer),
        "tag": int(tag),
        "what": what,
        "where": where,
    }
