"""bbridge.wire.rpc: timeouts, concurrent handlers, end of input, closing, and writes that fail."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from bbridge.wire import rpc
from bbridge.wire.rpc import Connection, Notification, Request, RpcError
from tests.rpc_peers import Peer, linked, refused, serving

# -- timeouts, concurrency, closing ------------------------------------------


async def test_timeout_then_late_response_is_ignored(autojump_clock: trio.testing.MockClock) -> None:
    async with serving() as (conn, peer):
        start = trio.current_time()
        with pytest.raises(rpc.RequestTimeout) as info:
            await conn.request("thread/start", timeout=120)
        assert trio.current_time() - start == pytest.approx(120)
        assert (info.value.code, info.value.message) == (rpc.BRIDGE_ERROR, "JSON-RPC request timed out: thread/start")
        start = trio.current_time()
        with pytest.raises(rpc.RequestTimeout):
            await conn.request("model/list")
        assert trio.current_time() - start == pytest.approx(30)
        # late answers for both: ignored, never answered, the connection keeps working
        await peer.send('{"id":1,"result":{}}', '{"id":2,"result":{}}', '{"id":"probe","method":"p"}')
        answers = await peer.read_until("probe")
        assert [a["id"] for a in answers] == [1, 2, "probe"]  # our two requests, then the probe's answer
        assert answers[2]["error"]["code"] == rpc.METHOD_NOT_FOUND


async def test_slow_handler_does_not_block_reading() -> None:
    release = trio.Event()
    order: list[str] = []

    async def handler(request: Request) -> Any:
        if request.method == "slow":
            await release.wait()
        order.append(request.method)
        return request.method

    async with linked({"on_request": handler}) as (client, _), trio.open_nursery() as nursery:
        nursery.start_soon(client.request, "slow")
        assert await client.request("fast") == "fast"
        release.set()
    assert order == ["fast", "slow"]


async def test_handlers_start_in_arrival_order() -> None:
    state: list[str] = []

    async def handler(request: Request) -> Any:
        state.append(request.method)  # before the first checkpoint
        snapshot = list(state)
        await trio.sleep(0)
        return snapshot

    async with serving(on_request=handler) as (_, peer):
        await peer.send(*(f'{{"id":{i},"method":"m{i}"}}' for i in range(5)))
        answers = {m["id"]: m["result"] for m in [await peer.read() for _ in range(5)]}
    assert answers == {i: [f"m{j}" for j in range(i + 1)] for i in range(5)}


async def test_eof_fails_pending_requests_and_run_returns() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    conn = Connection(ours.send_stream, ours.receive_stream, name="child")
    failures: list[RpcError] = []

    async def ask() -> None:
        with pytest.raises(rpc.ConnectionClosed) as info:
            await conn.request("turn/start")
        failures.append(info.value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        nursery.start_soon(ask)
        nursery.start_soon(ask)
        peer = Peer(theirs)
        await peer.read()
        await peer.read()
        await theirs.send_stream.aclose()
    assert len(failures) == 2
    assert conn.closed
    with pytest.raises(rpc.ConnectionClosed):
        await conn.request("after")


async def test_unterminated_last_line_is_processed_at_eof() -> None:
    got: list[Notification] = []

    async def on_notifications(batch: list[Notification]) -> None:
        got.extend(batch)

    ours, theirs = trio.testing.memory_stream_pair()
    conn = Connection(ours.send_stream, ours.receive_stream, name="t", on_notifications=on_notifications)
    await theirs.send_all(b'{"method":"last"}')
    await theirs.send_stream.aclose()
    await conn.run()
    assert [n.method for n in got] == ["last"]


@pytest.mark.parametrize("drain", [False, True])
async def test_eof_cancels_in_flight_handlers_unless_draining(
    drain: bool, autojump_clock: trio.testing.MockClock
) -> None:
    finished: list[str] = []

    async def handler(request: Request) -> Any:
        await trio.sleep(0.5)
        finished.append(request.method)

    ours, theirs = trio.testing.memory_stream_pair()
    conn = Connection(ours.send_stream, ours.receive_stream, name="t", on_request=handler)
    await theirs.send_all(b'{"id":1,"method":"work"}\n')
    await theirs.send_stream.aclose()
    await conn.run(drain=drain)
    assert finished == (["work"] if drain else [])
    if drain:
        assert json.loads(await theirs.receive_some()) == {"jsonrpc": "2.0", "id": 1, "result": None}


async def test_aclose_fails_pending_and_stops_run() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    conn = Connection(ours.send_stream, ours.receive_stream, name="t")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)

        async def ask() -> None:
            with pytest.raises(rpc.ConnectionClosed):
                await conn.request("x", timeout=None)

        nursery.start_soon(ask)
        await Peer(theirs).read()
        await conn.aclose()
        await conn.aclose()  # idempotent
    assert conn.closed


async def test_fail_pending_with_a_caller_error() -> None:
    async with serving() as (conn, peer), trio.open_nursery() as nursery:
        caught = refused(conn, nursery, "x")
        await peer.read()
        conn.fail_pending(RpcError(-32014, 'Provider "echo" exited unexpectedly (code 1)'))
    assert [(e.code, e.message) for e in caught] == [(-32014, 'Provider "echo" exited unexpectedly (code 1)')]


class _Broken(trio.abc.SendStream):
    def __init__(self, block_first: bool = False) -> None:
        self.block_first = block_first
        self.blocked = trio.Event()
        self.writes: list[bytes] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.block_first:
            self.block_first = False
            self.blocked.set()
            await trio.sleep_forever()
        if self.writes:
            raise trio.BrokenResourceError("EPIPE")
        self.writes.append(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def test_broken_pipe_on_write_is_swallowed(autojump_clock: trio.testing.MockClock) -> None:
    _, receive = trio.testing.memory_stream_one_way_pair()
    send = _Broken()
    conn = Connection(send, receive, name="t")
    await conn.notify("first")
    assert not conn.closed
    with pytest.raises(rpc.RequestTimeout):  # the write fails silently; the request times out
        await conn.request("lost", timeout=5)
    assert conn.closed
    await conn.notify("dropped")
    with pytest.raises(rpc.ConnectionClosed):
        await conn.request("refused")
    assert send.writes == [b'{"jsonrpc":"2.0","method":"first"}\n']


async def test_cancelled_write_terminates_the_torn_line_next_time() -> None:
    _, receive = trio.testing.memory_stream_one_way_pair()
    send = _Broken(block_first=True)
    conn = Connection(send, receive, name="t")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.notify, "torn")
        await send.blocked.wait()
        nursery.cancel_scope.cancel()
    await conn.notify("next")
    assert send.writes == [b'\n{"jsonrpc":"2.0","method":"next"}\n']


async def test_no_send_stream_means_closed_for_writing() -> None:
    _, receive = trio.testing.memory_stream_one_way_pair()
    conn = Connection(None, receive, name="read-only")
    assert conn.closed
    await conn.notify("ignored")
    with pytest.raises(rpc.ConnectionClosed):
        await conn.request("x")
