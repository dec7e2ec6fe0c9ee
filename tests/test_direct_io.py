"""Direct I/O: `rpc.Connection.write_now` and the client outbox that uses it, over real socket pairs; the bridge
stdout reader that waits before it reads, over real pipes."""

from __future__ import annotations

import os
import random
import socket

import pytest
import trio
import trio.testing

from bbridge.daemon.bridge import _PipeReceive
from bbridge.daemon.runtime import Daemon
from bbridge.daemon.server import ClientConnection
from bbridge.wire.rpc import Connection


def _socket_pair(send_buffer: int | None = None) -> tuple[trio.SocketStream, socket.socket]:
    """Our side as trio sees it, and the peer as a plain non-blocking socket the test reads when it likes."""
    ours, peer = socket.socketpair()
    if send_buffer is not None:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    peer.setblocking(False)
    return trio.SocketStream(trio.socket.from_stdlib_socket(ours)), peer


def _connection(stream: trio.SocketStream) -> Connection:
    _, receive = trio.testing.memory_stream_one_way_pair()
    return Connection(stream, receive, name="t", fileno=stream.socket.fileno)


def _fill(stream: trio.SocketStream) -> bytes:
    """Writes filler until the socket takes no more; returns what it wrote."""
    written = bytearray()
    while True:
        try:
            written += b"x" * os.write(stream.socket.fileno(), b"x" * 4096)
        except BlockingIOError:
            return bytes(written)


def _drain(peer: socket.socket) -> bytes:
    data = bytearray()
    while True:
        try:
            chunk = peer.recv(1 << 16)
        except BlockingIOError:
            return bytes(data)
        if not chunk:
            return bytes(data)
        data += chunk


async def _read_until(peer: socket.socket, size: int) -> bytes:
    data = bytearray()
    with trio.fail_after(10):
        while len(data) < size:
            data += _drain(peer)
            await trio.sleep(0.001)
    return bytes(data)


async def test_an_idle_connection_writes_at_once() -> None:
    stream, peer = _socket_pair()
    conn = _connection(stream)
    assert conn.write_now([b'{"a":1}', b'{"b":2}'])
    assert _drain(peer) == b'{"a":1}\n{"b":2}\n'  # written before any scheduler pass
    assert not conn.unsent and not conn.write_closed


async def test_a_full_socket_or_a_write_under_way_leaves_the_lines_to_the_caller() -> None:
    stream, peer = _socket_pair(send_buffer=4096)
    conn = _connection(stream)
    filler = _fill(stream)
    assert not conn.write_now([b'{"full":1}'])  # the stream takes nothing: nothing written, nothing kept
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.send_lines, [b'{"queued":1}'])
        await trio.testing.wait_all_tasks_blocked()  # that write holds the lock, waiting for room
        assert not conn.write_now([b'{"behind":1}'])
        received = await _read_until(peer, len(filler) + len(b'{"queued":1}\n'))
    assert received == filler + b'{"queued":1}\n'
    assert conn.write_now([b'{"after":1}']) and _drain(peer) == b'{"after":1}\n'


async def test_what_the_socket_did_not_take_goes_first_in_the_next_write() -> None:
    stream, peer = _socket_pair(send_buffer=4096)
    conn = _connection(stream)
    big = b'{"text":"' + b"y" * (1 << 20) + b'"}'
    assert conn.write_now([big])
    assert conn.unsent  # a megabyte does not fit a 4 KiB buffer: the rest waits
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.send_lines, [b'{"next":1}'])
        received = await _read_until(peer, len(big) + 1 + len(b'{"next":1}\n'))
    assert received == big + b'\n{"next":1}\n'
    assert not conn.unsent


async def test_a_peer_that_closed_is_written_off_and_a_closed_connection_writes_nothing() -> None:
    stream, peer = _socket_pair()
    conn = _connection(stream)
    peer.close()
    assert conn.write_now([b'{"lost":1}'])  # taken and dropped, as `send_lines` drops them
    assert conn.write_closed
    assert not conn.write_now([b'{"refused":1}'])
    stream, peer = _socket_pair()
    conn = _connection(stream)
    await conn.aclose()
    assert not conn.write_now([b'{"refused":1}'])  # its descriptor is gone (-1), never a reused number
    send, receive = trio.testing.memory_stream_one_way_pair()
    without = Connection(send, receive, name="memory")
    assert not without.write_now([b'{"no descriptor":1}'])


async def test_a_client_gets_every_line_in_order_whether_its_socket_keeps_up_or_fills() -> None:
    """Lines go out at once while the client reads, queue behind a full socket, and come out in order either way."""
    stream, peer = _socket_pair(send_buffer=8192)
    _, requests = trio.testing.memory_stream_one_way_pair()
    client = ClientConnection(Daemon({}), stream, requests, "c", queue_bytes=1 << 30)
    rng = random.Random(7)
    batches = [
        [b'{"n":%d,"pad":"%s"}' % (n * 10 + k, b"z" * rng.choice((0, 10, 3000))) for k in range(rng.randint(1, 4))]
        for n in range(400)
    ]
    expected = b"".join(line + b"\n" for batch in batches for line in batch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        await trio.testing.wait_all_tasks_blocked()
        client.enqueue(batches[0])
        assert _drain(peer) == b"".join(line + b"\n" for line in batches[0])  # the idle writer was not needed
        received = bytearray(b"".join(line + b"\n" for line in batches[0]))
        for n, batch in enumerate(batches[1:]):
            client.enqueue(batch)
            if n % 20 == 0:  # now and then the peer reads and the writer catches up: direct writes again
                for _ in range(5):
                    received += _drain(peer)
                    await trio.sleep(0.001)
        received += await _read_until(peer, len(expected) - len(received))
        nursery.cancel_scope.cancel()
    assert bytes(received) == expected


def _pipe() -> tuple[_PipeReceive, int]:
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    return _PipeReceive(trio.lowlevel.FdStream(read_end)), write_end


async def test_a_bridge_pipe_gives_each_chunk_as_it_comes_then_eof() -> None:
    pipe, write_end = _pipe()
    async with trio.open_nursery() as nursery:

        async def write_later() -> None:
            for chunk in (b'{"a":1}\n', b'{"b":2}\n{"c"'):
                await trio.sleep(0.01)
                os.write(write_end, chunk)
            os.close(write_end)

        nursery.start_soon(write_later)
        with trio.fail_after(5):
            got = [await pipe.receive_some(), await pipe.receive_some(), await pipe.receive_some()]
    assert got == [b'{"a":1}\n', b'{"b":2}\n{"c"', b""]
    await pipe.aclose()


async def test_a_bridge_pipe_closed_while_waiting_or_before_raises_closed() -> None:
    pipe, write_end = _pipe()
    outcome: list[type[BaseException]] = []

    async def wait() -> None:
        try:
            await pipe.receive_some()
        except trio.ClosedResourceError as exc:
            outcome.append(type(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        await pipe.aclose()
    assert outcome == [trio.ClosedResourceError]
    with pytest.raises(trio.ClosedResourceError):
        await pipe.receive_some()
    os.close(write_end)
