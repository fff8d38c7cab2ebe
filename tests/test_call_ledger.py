"""The rank's call ledger and socket addresses: the record's bounds, /proc parsing, and the
mapping of a Gloo error's peer address back to a rank (no torch here: tests/test_calls_e2e.py
runs the real thing)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from safelaunch.rank import sockets
from safelaunch.rundir import calls_file, comm_file


def test_the_ledger_keeps_its_newest_lines_within_twice_its_cap(tmp_path: Path) -> None:
    where = calls_file.path(tmp_path, 0)
    writer = calls_file.CallsWriter(str(where), limit=50)
    writer.group("0", [0, 1], "default_pg")
    for n in range(1, 201):
        writer.collective(n, True, "0", n, "all_reduce", "float32[4]", "t.py:1")
        writer.done(n)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [calls_file.name(0), "rank0" + calls_file.OLD_SUFFIX]
    lines = sum(len(p.read_text().splitlines()) for p in tmp_path.iterdir())
    assert lines <= 2 * 50 + 2  # two files and their notes
    ledger = calls_file.read_all(tmp_path)[0]
    assert ledger.truncated and ledger.groups[0].ranks == (0, 1)  # groups written again
    assert ledger.calls[0].n > 1  # the oldest were dropped
    assert ledger.calls[-1].count == 200 and ledger.calls[-1].done
    assert [c.n for c in ledger.calls] == sorted(c.n for c in ledger.calls)


def test_one_rotation_loses_nothing(tmp_path: Path) -> None:
    writer = calls_file.CallsWriter(str(calls_file.path(tmp_path, 0)), limit=10)
    for n in range(1, 5):
        writer.collective(n, True, "0", n, "barrier", "", "t.py:1")
        writer.done(n)
    ledger = calls_file.read_all(tmp_path)[0]
    assert not ledger.truncated and [c.n for c in ledger.calls] == [1, 2, 3, 4]


def test_a_torn_or_foreign_line_is_left_out() -> None:
    lines = [
        "G\t0\t0,1\tdefault_pg",
        "C\t1\tb\t0\t1\tall_reduce\tfloat32[4]\tt.py:3",
        "C\t2\tb\t0\t2\tall_red",  # torn by a SIGKILL
        "D\tx",
        "nonsense",
    ]
    ledger = calls_file.parse(4, lines)
    assert [c.n for c in ledger.calls] == [1] and ledger.calls[0].blocked


def test_a_call_says_itself_in_words() -> None:
    call = calls_file.Call(
        n=3, kind=calls_file.CallKind.P2P, op="recv", group="0", peer=2, what="float32[8]"
    )
    assert call.shown() == "recv float32[8] from rank 2"
    collective = calls_file.Call(
        n=1, kind=calls_file.CallKind.COLLECTIVE, op="barrier", group="1", count=4, where="t.py:7"
    )
    assert collective.shown() == "barrier #4 at t.py:7"


@pytest.mark.parametrize(
    ("hex_address", "host"),
    [
        ("0100007F", "127.0.0.1"),
        ("00000000", "0.0.0.0"),
        ("0000000000000000FFFF00000100007F", "127.0.0.1"),  # IPv4-mapped
        ("00000000000000000000000001000000", "::1"),
        ("00000000000000000000000000000000", "::"),
    ],
)
def test_proc_addresses_read_as_text(hex_address: str, host: str) -> None:
    assert sockets.host_of(hex_address) == host


def test_only_the_process_s_own_sockets_are_taken_from_the_table() -> None:
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when uid timeout inode"
    tail = "00000000:00000000 00:00000000 00000000  1000        0"
    ours = f"   0: 0100007F:9DF8 0100007F:AB09 01 {tail} 4242 1"
    theirs = f"   1: 0100007F:1F90 00000000:0000 0A {tail} 999 1"
    assert sockets.local_addresses([header, ours, theirs], {"4242"}) == [("127.0.0.1", 40440)]


def test_the_rank_finds_a_socket_it_listens_on() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert ("127.0.0.1", port) in sockets.tcp_addresses()


def _record(tmp_path: Path, rank: int, addresses: list[list[object]]) -> None:
    comm_file.write(str(comm_file.path(tmp_path, rank)), {"addresses": addresses})


def test_a_gloo_peer_address_maps_back_to_the_one_rank_that_owned_it(tmp_path: Path) -> None:
    _record(tmp_path, 0, [["127.0.0.1", 29500], ["::", 43785]])
    _record(tmp_path, 1, [["127.0.0.1", 40440], ["127.0.0.1", 41199]])
    _record(tmp_path, 2, [["10.0.0.2", 40440]])
    assert comm_file.rank_of_address(tmp_path, "127.0.0.1", 40440) == 1
    assert comm_file.rank_of_address(tmp_path, "127.0.0.1", 63645) == 1  # as Gloo prints it
    assert comm_file.rank_of_address(tmp_path, "10.0.0.2", 40440) == 2
    assert comm_file.rank_of_address(tmp_path, "[::ffff:127.0.0.1]", 43785) == 0  # wildcard
    assert comm_file.rank_of_address(tmp_path, "127.0.0.1", 1234) is None


def test_an_address_two_ranks_owned_names_nobody(tmp_path: Path) -> None:
    _record(tmp_path, 0, [["0.0.0.0", 5000]])
    _record(tmp_path, 1, [["127.0.0.1", 5000]])
    assert comm_file.rank_of_address(tmp_path, "127.0.0.1", 5000) is None
