"""The backend record: `<attempt>/rank<N>.comm.json`.

Written by the rank's torch.distributed hooks (safelaunch/rank/dist_hooks.py) as it calls
init_process_group (before the call: init itself may be what fails, then after it with
the backend it got), when an isolation rerun swaps a group's backend, and when it builds
a DistributedDataParallel, and after each group it creates with the local addresses of
the rank's TCP sockets (rank/sockets.py). Its existence says the rank reached
torch.distributed. Read by the isolation policy and verdicts (isolation/evidence.py), the
flight-record request, and rank_of_address (Gloo's error texts name peers by address).
"""

from __future__ import annotations

from safelaunch.rundir.frozen import Record
from safelaunch.rundir.jsontext import write_atomically
from safelaunch.rundir.layout import rank_files

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

SUFFIX = ".comm.json"


class CommRecord(Record):
    """What one rank asked init_process_group for, and what it got."""

    rank: int
    requested: str | None  # the backend argument (None: torch's default)
    used: str | None  # written once init returned: None means it never did
    swapped: bool  # an isolation rerun put Gloo in its place
    ddp: bool  # it built a DistributedDataParallel
    addresses: tuple[tuple[str, int], ...] = ()  # local (host, port) of its TCP sockets


def name(rank: int | str) -> str:
    return f"rank{rank}{SUFFIX}"


def path(attempt_dir: Path, rank: int) -> Path:
    return attempt_dir / name(rank)


def write(path: str, record: dict[str, object]) -> None:
    """The rank's side: {requested, used, swapped, groups: [[asked, used]...], ddp}."""
    write_atomically(path, record)


def read_all(attempt_dir: Path) -> dict[int, CommRecord]:
    """Every rank's record in the attempt, by rank; unreadable ones left out."""
    import json  # the launcher's side only

    found: dict[int, CommRecord] = {}
    for rank, path in rank_files(attempt_dir, SUFFIX):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(record, dict):
            continue
        requested, used = record.get("requested"), record.get("used")
        found[rank] = CommRecord(
            rank=rank,
            requested=None if requested is None else str(requested),
            used=None if used is None else str(used),
            swapped=bool(record.get("swapped")),
            ddp=bool(record.get("ddp")),
            addresses=_addresses(record.get("addresses")),
        )
    return found


def _addresses(value: object) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, list):
        return ()
    return tuple(
        (str(a[0]), int(a[1]))
        for a in value
        if isinstance(a, list) and len(a) == 2 and isinstance(a[1], int)
    )


WILDCARDS = ("0.0.0.0", "::")


def _swapped(port: int) -> int:
    return ((port & 0xFF) << 8) | (port >> 8)


def rank_of_address(attempt_dir: Path, host: str, port: int) -> int | None:
    """The rank that owned the socket at host:port, as a Gloo error text names a peer;
    None unless exactly one rank did.

    Gloo 2.13 prints the port byte-swapped ("Connection closed by peer [127.0.0.1]:63645"
    for the peer's port 40440 = 0x9DF8; measured on x86, tests/test_calls_e2e.py): the
    port as printed and swapped are both tried. The socket is the far end of the pair as
    the survivor saw it: the peer's listening port or its connection's ephemeral one,
    both recorded.
    """
    host = host.strip("[]").removeprefix("::ffff:")
    wanted = {port, _swapped(port)} if 0 <= port < 1 << 16 else {port}
    owners = {
        record.rank
        for record in read_all(attempt_dir).values()
        for at, owned in record.addresses
        if owned in wanted and (at in WILDCARDS or at.removeprefix("::ffff:") == host)
    }
    return owners.pop() if len(owners) == 1 else None
