"""A WebSocket client's lines go out as a Unix-socket client's do: framed and written in the broadcast itself
(`rpc.Connection.write_now`), what the socket does not take kept and sent first by the next write."""

from __future__ import annotations

import socket

import trio
from wsproto import WSConnection
from wsproto.events import TextMessage

from bbridge.listen.wsstream import WebSocketStream
from bbridge.wire import rpc
from tests.test_websocket_lines import pair


def _open() -> tuple[rpc.Connection, WebSocketStream, trio.SocketStream, WSConnection]:
    """A daemon-side connection over a WebSocket on one end of a socket pair; the raw other end and its client."""
    ours, theirs = socket.socketpair()
    lines, client = pair()
    ws = WebSocketStream(trio.SocketStream(trio.socket.from_stdlib_socket(ours)), lines, b"", "ws-test")
    peer = trio.SocketStream(trio.socket.from_stdlib_socket(theirs))
    return rpc.Connection(ws, ws, name="ws-test"), ws, peer, client


async def _texts(theirs: trio.SocketStream, client: WSConnection, count: int) -> list[str]:
    """The next `count` text messages (a long one arrives in pieces)."""
    texts: list[str] = []
    part = ""
    while len(texts) < count:
        client.receive_data(bytes(await theirs.receive_some(1 << 20)))
        for event in client.events():
            if isinstance(event, TextMessage):
                part += event.data
                if event.message_finished:
                    texts.append(part)
                    part = ""
    return texts


async def _collect(got: list[str], theirs: trio.SocketStream, client: WSConnection) -> None:
    got += await _texts(theirs, client, 2)


def test_write_now_frames_and_writes_at_once_and_keeps_what_the_socket_did_not_take() -> None:
    async def main() -> None:
        with trio.fail_after(10):
            await written()

    async def written() -> None:
        conn, ws, theirs, client = _open()
        assert conn.write_now([b'{"a":1}', b'{"b":2}']) and not conn.unsent  # no task ran: written in the call
        assert await _texts(theirs, client, 2) == ['{"a":1}', '{"b":2}']
        big = b'{"x":"' + b"y" * (1 << 20) + b'"}'
        assert conn.write_now([big]) and conn.unsent and ws.backlog  # more than the socket buffer takes at once
        assert not conn.write_now([b'{"c":3}'])  # behind a backlog: the caller queues it for the writer
        got: list[str] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: _collect(got, theirs, client))
            await conn.send_lines([b'{"c":3}'])  # the backlog first, then the queued line
        assert got == [big.decode(), '{"c":3}'] and not conn.unsent
        await conn.aclose()
        await theirs.aclose()

    trio.run(main)
