"""Record mode's tee (protocol.md §5): a pipe's complete lines handed to a recorder as they pass.

One pair serves both ends of the protocol: the daemon tees a bridge's pipes into the runtime lanes, a bridge
written with the kit tees its provider child's pipes into the provider lanes. Both sides split with the bounded
`LineReader`, so a write that is not a whole line is recorded once its line is complete, an oversized line is not
recorded, and neither is an unterminated final one.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from bbridge.wire import framing

Record = Callable[[bytes], None]


class TeeSend(trio.abc.SendStream):
    """Records each complete line written, before writing it."""

    def __init__(self, inner: trio.abc.SendStream, record: Record) -> None:
        self._inner, self._record, self._lines = inner, record, framing.LineReader()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        for line in self._lines.feed(data):
            if isinstance(line, bytes):
                self._record(line)
        await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._inner.aclose()


class TeeReceive(trio.abc.ReceiveStream):
    """Records each complete line read."""

    def __init__(self, inner: trio.abc.ReceiveStream, record: Record) -> None:
        self._inner, self._record, self._lines = inner, record, framing.LineReader()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self._inner.receive_some(max_bytes)
        for line in self._lines.feed(data):
            if isinstance(line, bytes):
                self._record(line)
        return data

    async def aclose(self) -> None:
        await self._inner.aclose()


def tee(
    send: trio.abc.SendStream, receive: trio.abc.ReceiveStream, sent: Record, received: Record
) -> tuple[TeeSend, TeeReceive]:
    """Both pipes of a process teed: `sent` records the lines written to it, `received` those read from it."""
    return TeeSend(send, sent), TeeReceive(receive, received)
