"""Pure line handling for the console: cutting a byte stream into lines, prefixing them.

Files get the raw bytes; only the console sees lines. `\\r` ends a console line
too, so a progress bar that never writes `\\n` still shows (one update behind)
and never holds back or splits another rank's output.
"""

from __future__ import annotations

import re

MAX_LINE = 64 * 1024  # longer unterminated text is shown in pieces of this size
_LINE = re.compile(rb"([^\r\n]*)(\r\n|\n|\r)")


class LineAssembler:
    """Turns chunks from one stream into complete console lines."""

    __slots__ = ("_pending", "_shown_early")

    def __init__(self) -> None:
        self._pending = b""
        self._shown_early = False  # the current line went out unterminated (flush)

    @property
    def pending(self) -> bool:
        """True while an unterminated line is held back."""
        return bool(self._pending)

    def feed(self, data: bytes) -> list[bytes]:
        """Add a chunk; return the lines it completed, terminators removed."""
        buf = self._pending + data
        if b"\r" not in buf:  # the common case, at C speed
            lines = buf.split(b"\n")
            self._pending = lines.pop()
        else:
            lines = self._split_with_cr(buf)
        if self._shown_early and (lines or self._pending):
            self._shown_early = False
            if lines and not lines[0]:
                del lines[0]  # the terminator of a line the console already showed
        if len(self._pending) > MAX_LINE:
            cut = char_boundary(self._pending)
            lines.append(self._pending[:cut])
            self._pending = self._pending[cut:]
        return lines

    def _split_with_cr(self, buf: bytes) -> list[bytes]:
        hold = b""
        if buf.endswith(b"\r"):  # maybe the first half of \r\n: decide on the next chunk
            buf, hold = buf[:-1], b"\r"
        lines = []
        end = 0
        for match in _LINE.finditer(buf):
            text, terminator = match.group(1), match.group(2)
            end = match.end()
            if text or terminator != b"\r":  # a bare \r before text (tqdm) is no line
                lines.append(text)
        self._pending = buf[end:] + hold
        return lines

    def flush(self, ended: bool = True) -> bytes | None:
        """Give up on the held line (stream ended or went quiet); None if there is none.

        Went quiet (`ended` False): a character the writer paused inside stays held,
        to be shown whole with the rest of the line.
        """
        cut = len(self._pending) if ended else char_boundary(self._pending)
        text = self._pending[:cut].rstrip(b"\r")
        self._pending = self._pending[cut:]
        self._shown_early = bool(text)
        return text or None


def char_boundary(data: bytes) -> int:
    """Where an unfinished UTF-8 character at the end of `data` begins (len if none).

    The console decodes each piece of a line on its own; cut inside a character, both
    halves would show as U+FFFD. Bytes that cannot begin a character are not held:
    invalid input shows replaced, as before.
    """
    for back in range(1, min(3, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: the character starts here
            need = 2 if 0xC2 <= byte < 0xE0 else 3 if 0xE0 <= byte < 0xF0 else 4
            return len(data) - back if 0xC2 <= byte <= 0xF4 and need > back else len(data)
    return len(data)


def rank_label(rank: int, width: int, node: int | None = None) -> str:
    """`[rank0]:` for up to 10 ranks, `[rank 0]:` / `[rank15]:` when widths differ.

    With several nodes the node comes first: `[node1/rank2]:`.
    """
    if node is not None:
        return f"[node{node}/rank{rank:>{width}}]:"
    return f"[rank{rank:>{width}}]:"


def format_lines(lines: list[bytes], prefix: str, rank: int) -> bytes:
    """Prefix each line for the console; invalid UTF-8 is shown replaced.

    torch prefixes tracebacks with its own `[rankN]:` after init_process_group;
    that marker is dropped so a line never carries two prefixes.
    """
    text = b"\n".join(lines).decode("utf-8", "replace")
    parts = text.split("\n")
    own = f"[rank{rank}]:"
    if own in text:
        parts = [_strip_marker(part, own) for part in parts]
    return (prefix + ("\n" + prefix).join(parts) + "\n").encode("utf-8", "replace")


def _strip_marker(line: str, marker: str) -> str:
    if not line.startswith(marker):
        return line
    rest = line[len(marker) :]
    return rest[1:] if rest.startswith(" ") else rest
