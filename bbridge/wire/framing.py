"""Newline-delimited framing (protocol.md §1.2), sans-IO: bytes in, complete lines out; no trio, no I/O.

`LineReader` is what every line-protocol reader in bbridge splits its stream with: the JSON-RPC `Connection`
(`bbridge.wire.rpc`) and the agent children's stdout alike.

* `Overflow.size` counts the whole dropped line; the reference's counter misses the segment before the
  terminator. Lines longer than the cap are dropped whether or not they arrived in one chunk, so framing never
  depends on how the stream was chunked.
* One trailing CR is removed from each line (a peer writing CRLF frames the same lines).
"""

from __future__ import annotations

from typing import NamedTuple, cast

MAX_LINE_BYTES = 64 * 1024 * 1024
HEAD_BYTES = 4096  # what an oversized line keeps, so its id can still be answered


class Overflow(NamedTuple):
    """An oversized line was discarded; `size` is its byte count (terminator excluded), `head` its first bytes."""

    size: int
    head: bytes = b""


class LineReader:
    """Bounded line splitter of protocol.md §1.2, over bytes (0x0A never occurs inside a UTF-8 sequence)."""

    def __init__(self, max_bytes: int = MAX_LINE_BYTES) -> None:
        self._max = max_bytes
        self._pending = bytearray()
        self._discarding = False
        self._discarded = 0
        self._head = b""

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | Overflow]:
        """Complete lines in order (one trailing CR removed), an `Overflow` where a line was dropped."""
        data = bytes(data)
        parts = data.split(b"\n")
        tail = parts.pop()
        pending = self._pending
        if (
            not self._discarding
            and len(pending) + len(data) <= self._max
            and b"\r" not in data
            and not pending.endswith(b"\r")
        ):
            # the streaming hot path: no line can be too long and none ends in CR
            if pending and parts:
                parts[0] = bytes(pending) + parts[0]
                pending.clear()
            if tail:
                pending += tail
            return cast("list[bytes | Overflow]", parts)
        out: list[bytes | Overflow] = []
        for segment in parts:
            if self._discarding:
                out.append(Overflow(self._discarded + len(segment), self._head))
                self._discarding, self._discarded, self._head = False, 0, b""
                continue
            if self._pending:
                self._pending += segment
                segment = bytes(self._pending)
                self._pending.clear()
            out.append(
                _strip_cr(segment) if len(segment) <= self._max else Overflow(len(segment), segment[:HEAD_BYTES])
            )
        if self._discarding:
            self._discarded += len(tail)
        elif tail:
            self._pending += tail
            if len(self._pending) > self._max:
                self._discarding, self._discarded = True, len(self._pending)
                self._head = bytes(self._pending[:HEAD_BYTES])
                self._pending = bytearray()
        return out

    def whole(self, data: bytes | bytearray) -> bool:
        """Whether `data` is whole lines by itself (nothing pending or being dropped, newline-terminated, no CR, no
        longer than the bound): its lines are then exactly those `feed` would return, and a reader may take them
        from `data` directly, leaving this reader as it is (or `feed` it)."""
        return (
            not self._pending
            and not self._discarding
            and len(data) <= self._max
            and data.endswith(b"\n")
            and b"\r" not in data
        )

    def close(self) -> list[bytes]:
        """The unterminated tail at end of stream; an oversized one is dropped silently."""
        tail, self._pending = bytes(self._pending), bytearray()
        discarding, self._discarding, self._discarded, self._head = self._discarding, False, 0, b""
        return [_strip_cr(tail)] if tail and not discarding else []


def _strip_cr(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line
