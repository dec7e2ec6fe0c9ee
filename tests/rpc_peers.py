"""The rpc tests' far ends: a scripted `Peer` on in-memory streams, a served `Connection`, two linked connections."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from bbridge.wire.framing import LineReader
from bbridge.wire.rpc import Connection, Notification, Request, RpcError


class Peer:
    """The far end of a connection, speaking raw lines."""

    def __init__(self, stream: trio.abc.HalfCloseableStream) -> None:
        self.stream = stream
        self.reader = LineReader()
        self.lines: deque[bytes] = deque()

    async def send(self, *lines: str | bytes) -> None:
        """All lines in one write, so the connection reads them as one chunk."""
        await self.stream.send_all(b"".join((x.encode() if isinstance(x, str) else x) + b"\n" for x in lines))

    async def read_line(self) -> bytes:
        while not self.lines:
            data = await self.stream.receive_some()
            if not data:
                raise EOFError
            self.lines.extend(line for line in self.reader.feed(data) if isinstance(line, bytes))
        return self.lines.popleft()

    async def read(self) -> Any:
        return json.loads(await self.read_line())

    async def read_until(self, id: Any) -> list[Any]:
        """Messages up to and including the response with `id`."""
        out = [await self.read()]
        while out[-1].get("id") != id or "method" in out[-1]:
            out.append(await self.read())
        return out


@asynccontextmanager
async def serving(**kwargs: Any) -> AsyncIterator[tuple[Connection, Peer]]:
    """A running Connection wired to a raw Peer."""
    ours, theirs = trio.testing.memory_stream_pair()
    conn = Connection(ours.send_stream, ours.receive_stream, name="test", **kwargs)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        yield conn, Peer(theirs)
        nursery.cancel_scope.cancel()


def refused(conn: Connection, nursery: trio.Nursery, method: str) -> list[RpcError]:
    """Start a request that must fail; the returned list holds its RpcError once it has."""
    caught: list[RpcError] = []

    async def ask() -> None:
        with pytest.raises(RpcError) as info:
            await conn.request(method)
        caught.append(info.value)

    nursery.start_soon(ask)
    return caught


@asynccontextmanager
async def linked(
    server: dict[str, Any], client: dict[str, Any] | None = None
) -> AsyncIterator[tuple[Connection, Connection]]:
    """Two running Connections talking to each other: (client, server)."""
    a, b = trio.testing.memory_stream_pair()
    c = Connection(a.send_stream, a.receive_stream, name="client", **(client or {}))
    s = Connection(b.send_stream, b.receive_stream, name="server", **server)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c.run)
        nursery.start_soon(s.run)
        yield c, s
        nursery.cancel_scope.cancel()


def params_of(message: Request | Notification) -> Any:
    return None if message.params is None else msgspec.json.decode(message.params)
