"""The console line assembler and formatter: table tests and generated chunkings."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from safelaunch.supervisor.lines import MAX_LINE, LineAssembler, format_lines, rank_label


def _feed_all(chunks: list[bytes]) -> list[bytes]:
    assembler = LineAssembler()
    lines = [line for chunk in chunks for line in assembler.feed(chunk)]
    tail = assembler.flush()
    return lines + ([tail] if tail is not None else [])


def test_newline_carriage_return_and_crlf_end_lines() -> None:
    assert _feed_all([b"a\nb\r\nc\rd"]) == [b"a", b"b", b"c", b"d"]
    assert _feed_all([b"\rbar 1\rbar 2\n"]) == [b"bar 1", b"bar 2"]
    assert _feed_all([b"\n\n"]) == [b"", b""]  # blank lines are kept


def test_crlf_split_across_chunks_is_one_terminator() -> None:
    assert _feed_all([b"a\r", b"\nb\n"]) == [b"a", b"b"]


def test_partial_line_is_held_until_terminated() -> None:
    assembler = LineAssembler()
    assert assembler.feed(b"epoch 1 ") == []
    assert assembler.pending
    assert assembler.feed(b"loss 0.5\n") == [b"epoch 1 loss 0.5"]


def test_newline_after_an_early_shown_partial_adds_no_blank_line() -> None:
    assembler = LineAssembler()
    assembler.feed(b"loading...")
    assert assembler.flush() == b"loading..."
    assert assembler.feed(b"\nnext\n") == [b"next"]


def test_overlong_line_is_cut() -> None:
    lines = LineAssembler().feed(b"x" * (MAX_LINE + 10))
    assert lines == [b"x" * (MAX_LINE + 10)]


@given(
    st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\r", b"\r\n", b"\xff"]), max_size=40), st.data()
)
def test_any_chunking_gives_the_same_lines(pieces: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert _feed_all(chunks) == _feed_all([stream])


def test_format_prefixes_every_line_and_drops_torchs_own_marker() -> None:
    out = format_lines(
        [b"[rank1]: Traceback", b"[rank1]:[W123] warn", b"plain", b"[rank2]: x"], "[rank1]: ", 1
    )
    assert out.decode().splitlines() == [
        "[rank1]: Traceback",
        "[rank1]: [W123] warn",
        "[rank1]: plain",
        "[rank1]: [rank2]: x",
    ]
    assert format_lines([b"\xff ok"], "p ", 0) == "p \ufffd ok\n".encode()


def test_labels_align() -> None:
    assert rank_label(3, 1) == "[rank3]:"
    assert [rank_label(r, 2) for r in (0, 15)] == ["[rank 0]:", "[rank15]:"]
