"""bbridge.wire.rpc: the JSON-RPC connection (trio), over in-memory streams; its sans-IO parts are
tests/test_framing.py and tests/test_jsonrpc.py."""

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

from bbridge.core import scalars
from bbridge.wire import rpc
from bbridge.wire.delta_decoder import TypedDecoder
from bbridge.wire.framing import LineReader
from bbridge.wire.rpc import Connection, Notification, Request, RpcError

# -- helpers -----------------------------------------------------------------


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


# -- outbound wire format ----------------------------------------------------


async def test_request_wire_format_and_id_counter() -> None:
    async with serving() as (conn, peer), trio.open_nursery() as nursery:
        nursery.start_soon(conn.request, "initialize", {"protocolVersion": 2})
        assert (
            await peer.read_line() == b'{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":2},"id":1}'
        )
        nursery.start_soon(conn.request, "model/list")
        assert await peer.read_line() == b'{"jsonrpc":"2.0","method":"model/list","id":2}'
        nursery.start_soon(lambda: conn.request("x", [], id="parity-initialize"))
        assert await peer.read_line() == b'{"jsonrpc":"2.0","method":"x","params":[],"id":"parity-initialize"}'
        await conn.notify("thread/delta", {"threadId": "t"})
        assert await peer.read_line() == b'{"jsonrpc":"2.0","method":"thread/delta","params":{"threadId":"t"}}'
        await conn.notify("ping")
        assert await peer.read_line() == b'{"jsonrpc":"2.0","method":"ping"}'
        await peer.send('{"id":1,"result":{}}', '{"id":2,"result":{}}', '{"id":"parity-initialize","result":{}}')


async def test_result_and_error_wire_format() -> None:
    async def handler(request: Request) -> Any:
        if request.method == "fail":
            raise RpcError(rpc.NO_ACTIVE_TURN, "No active turn", {"expected": "t1"})
        if request.method == "fail-bare":
            raise RpcError(rpc.BRIDGE_ERROR, "nope")
        return {"ok": True}

    async with serving(on_request=handler) as (_, peer):
        await peer.send('{"id":7,"method":"ok"}', '{"id":"x","method":"fail"}', '{"id":8,"method":"fail-bare"}')
        lines = sorted([await peer.read_line() for _ in range(3)])
        assert lines == [
            b'{"jsonrpc":"2.0","id":"x","error":{"code":-32001,"message":"No active turn","data":{"expected":"t1"}}}',
            b'{"jsonrpc":"2.0","id":7,"result":{"ok":true}}',
            b'{"jsonrpc":"2.0","id":8,"error":{"code":-32000,"message":"nope"}}',
        ]


async def test_send_lines_is_one_write() -> None:
    writes: list[bytes] = []

    class Recording(trio.abc.SendStream):
        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            writes.append(bytes(data))

        async def wait_send_all_might_not_block(self) -> None:
            pass

        async def aclose(self) -> None:
            pass

    _, receive = trio.testing.memory_stream_one_way_pair()
    conn = Connection(Recording(), receive, name="test")
    await conn.send_lines([b'{"a":1}', b'{"b":2}'])
    await conn.send_lines([])
    assert writes == [b'{"a":1}\n{"b":2}\n']


# -- classification ----------------------------------------------------------

CLASSIFICATION = [
    # (line, class) — protocol.md §1.3
    ('{"jsonrpc":"2.0","id":1,"method":"m"}', "request"),
    ('{"id":"s","method":"m","params":[1]}', "request"),
    ('{"id":2.5,"method":"m"}', "request"),
    ('{"method":"m","params":{"k":1}}', "notification"),
    ('{"id":null,"method":"m"}', "notification"),
    ('{"id":true,"method":"m"}', "notification"),
    ('{"id":{},"method":"m"}', "notification"),
    ('{"id":1,"result":{}}', "response"),
    ('{"id":"zz","error":{"code":-32601,"message":"x"}}', "response"),
    ('{"id":3,"method":""}', "response"),
    ('{"id":4,"method":null,"result":1}', "response"),
    ("this is { not json", "junk"),
    ("[1,2]", "junk"),
    ("42", "junk"),
    ("null", "junk"),
    ("{}", "junk"),
    ('{"result":1}', "junk"),
    ('{"id":9,"method":5}', "junk"),
]


@pytest.mark.parametrize(("line", "kind"), CLASSIFICATION)
async def test_classification(line: str, kind: str) -> None:
    seen: dict[str, list[Any]] = {"request": [], "notification": [], "junk": []}

    async def on_request(request: Request) -> Any:
        seen["request"].append(request)
        return "answered"

    async def on_notifications(batch: list[Notification]) -> None:
        seen["notification"].extend(batch)

    def on_junk(data: bytes, reason: str) -> None:
        seen["junk"].append(data)

    kwargs = {"on_request": on_request, "on_notifications": on_notifications, "on_junk": on_junk}
    async with serving(**kwargs) as (_, peer):
        await peer.send(line, '{"id":"probe","method":"probe"}')
        answers = await peer.read_until("probe")
    probe = seen["request"].pop()
    assert probe.method == "probe"
    counts = {k: len(v) for k, v in seen.items()}
    assert counts == {k: int(k == kind) for k in seen}
    # only requests are answered; responses, notifications and junk never are
    assert len(answers) == 1 + (kind == "request")
    if kind == "request":
        assert answers[0] == {"jsonrpc": "2.0", "id": json.loads(line)["id"], "result": "answered"}


async def test_request_params_absent_vs_null() -> None:
    got: list[Request] = []

    async def on_request(request: Request) -> Any:
        got.append(request)

    async with serving(on_request=on_request) as (_, peer):
        await peer.send('{"id":1,"method":"a"}', '{"id":2,"method":"b","params":null}')
        await peer.read_until(2)
    assert got[0].params is None
    assert bytes(got[1].params or b"") == b"null"


async def test_ids_are_independent_per_direction() -> None:
    """A request whose id equals our outstanding request id is a request, not our answer."""
    async with serving(on_request=lambda r: _const(f"served {r.method}")) as (conn, peer):
        async with trio.open_nursery() as nursery:
            results: list[Any] = []

            async def ask() -> None:
                results.append(await conn.request("ours"))

            nursery.start_soon(ask)
            assert (await peer.read())["id"] == 1
            await peer.send('{"jsonrpc":"2.0","id":1,"method":"theirs"}')
            assert await peer.read() == {"jsonrpc": "2.0", "id": 1, "result": "served theirs"}
            assert results == []
            await peer.send('{"jsonrpc":"2.0","id":1,"result":"for ours"}')
        assert results == ["for ours"]


async def _const(value: Any) -> Any:
    return value


async def test_both_directions_at_once_between_two_connections() -> None:
    async def server_handler(request: Request) -> Any:
        # ask the client back with our own id 1 while its id 1 is outstanding
        return {"inner": await server.request("callback", params_of(request))}

    async def client_handler(request: Request) -> Any:
        return {"echo": params_of(request)}

    async with linked({"on_request": server_handler}, {"on_request": client_handler}) as (client, server):
        assert await client.request("outer", {"n": 1}) == {"inner": {"echo": {"n": 1}}}


# -- peer errors, handler failures -------------------------------------------


async def test_peer_error_codes_round_trip() -> None:
    async def handler(request: Request) -> Any:
        if request.method == "steer":
            raise RpcError(rpc.NO_ACTIVE_TURN, "No active turn to steer", {"threadId": "t"})
        if request.method == "fork":
            raise RpcError(rpc.FORK_CHECKPOINT_UNSUPPORTED, "tip only")
        raise ValueError("handler blew up")

    async with linked({"on_request": handler}) as (client, _):
        with pytest.raises(RpcError) as info:
            await client.request("steer")
        assert (info.value.code, info.value.message, info.value.data) == (
            -32001,
            "No active turn to steer",
            {"threadId": "t"},
        )
        with pytest.raises(RpcError) as info:
            await client.request("fork")
        assert (info.value.code, info.value.data) == (-32003, None)
        with pytest.raises(RpcError) as info:
            await client.request("crash")
        assert (info.value.code, info.value.message) == (rpc.BRIDGE_ERROR, "handler blew up")


async def test_no_request_handler_answers_method_not_found() -> None:
    async with linked({}) as (client, _):
        with pytest.raises(RpcError) as info:
            await client.request("anything")
        assert (info.value.code, info.value.message) == (rpc.METHOD_NOT_FOUND, "Method not found: anything")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            '{"code":-32602,"message":"bad","data":[{"path":[],"message":"m"}]}',
            (-32602, "bad", [{"path": [], "message": "m"}]),
        ),
        ('{"code":-32001.0,"message":"float code"}', (-32001, "float code", None)),
        ('{"message":"no code"}', (rpc.BRIDGE_ERROR, "no code", None)),
        ('"boom"', (rpc.BRIDGE_ERROR, '"boom"', None)),
        ('{"code":"x"}', (rpc.BRIDGE_ERROR, '{"code":"x"}', None)),
    ],
)
async def test_malformed_peer_errors(error: str, expected: tuple[int, str, Any]) -> None:
    async with serving() as (conn, peer), trio.open_nursery() as nursery:
        caught = refused(conn, nursery, "m")
        await peer.read()
        await peer.send(f'{{"id":1,"error":{error}}}')
    assert [(e.code, e.message, e.data) for e in caught] == [expected]


async def test_falsy_error_is_a_result() -> None:
    async with serving() as (conn, peer), trio.open_nursery() as nursery:
        results: list[Any] = []

        async def ask(method: str) -> None:
            results.append(await conn.request(method))

        nursery.start_soon(ask, "a")
        await peer.read()
        await peer.send('{"id":1,"error":null,"result":5}')
        nursery.start_soon(ask, "b")
        await peer.read()
        await peer.send('{"id":2}')
    assert results == [5, None]


async def test_request_raw_leaves_the_result_undecoded() -> None:
    async with linked({"on_request": lambda r: _const({"providerThreadId": "p"})}) as (client, _):
        raw = await client.request_raw("thread/start")
        assert bytes(raw) == b'{"providerThreadId":"p"}'


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


# -- batching and ordering ---------------------------------------------------


async def test_one_notification_call_per_chunk_and_wire_order() -> None:
    log: list[Any] = []

    async def on_notifications(batch: list[Notification]) -> None:
        await trio.sleep(0)  # a handler that yields must still see its batch before later messages
        log.append([n.method for n in batch])

    async def on_request(request: Request) -> Any:
        log.append(f"request {request.method}")

    async with serving(on_notifications=on_notifications, on_request=on_request) as (conn, peer):
        await peer.send(*(f'{{"method":"n{i}"}}' for i in range(4)))
        await trio.testing.wait_all_tasks_blocked()  # keep the next write a separate chunk
        await peer.send('{"method":"a"}', '{"method":"b"}', '{"id":1,"method":"req"}', '{"method":"c"}', "junk")
        await peer.read()

        async def ask() -> None:
            await conn.request("stop")
            log.append("stop answered")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await peer.read()
            await peer.send('{"method":"settle1"}', '{"method":"settle2"}', '{"id":1,"result":{}}')
    assert log == [
        ["n0", "n1", "n2", "n3"],
        ["a", "b"],
        "request req",
        ["c"],
        ["settle1", "settle2"],
        "stop answered",
    ]


async def test_lone_surrogates_are_mended_not_lost() -> None:
    """JavaScript writes a lone surrogate as an escape msgspec refuses: the line arrives, U+FFFD in its place."""
    seen: list[Any] = []

    async def on_notifications(batch: list[Notification]) -> None:
        seen.extend((n.method, msgspec.json.decode(n.params) if n.params else None) for n in batch)

    async with serving(on_notifications=on_notifications) as (_, peer):
        await peer.send(
            '{"method":"a"}', '{"method":"b","params":{"t":"x\\ud83dy","u":"\\ud83d\\ude00"}}', '{"method":"c"}'
        )
        await trio.testing.wait_all_tasks_blocked()
    assert seen == [("a", None), ("b", {"t": "x\ufffdy", "u": "\U0001f600"}), ("c", None)]


async def test_notification_handler_failure_does_not_kill_the_connection() -> None:
    async def on_notifications(batch: list[Notification]) -> None:
        raise RuntimeError("bug")

    async with serving(on_notifications=on_notifications) as (_, peer):
        await peer.send('{"method":"x"}', '{"id":"probe","method":"probe"}')
        assert (await peer.read())["id"] == "probe"


# -- junk ----------------------------------------------------------------------


@pytest.mark.parametrize("answer_junk", [False, True])
async def test_junk_reporting_and_answering(answer_junk: bool) -> None:
    junk: list[tuple[bytes, str]] = []
    async with serving(
        on_junk=lambda line, reason: junk.append((line, reason)), answer_junk=answer_junk, max_line=64
    ) as (
        _,
        peer,
    ):
        await peer.send(
            "not json",
            "[1]",
            '{"id":5,"method":7}',
            '{"id":null,"method":7}',
            "   ",
            "x" * 100,
            '{"id":"probe","method":"probe"}',
        )
        answers = await peer.read_until("probe")
    assert [(line, reason.split(" (")[0]) for line, reason in junk] == [
        (b"not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"id":5,"method":7}', "not a JSON-RPC message"),
        (b'{"id":null,"method":7}', "not a JSON-RPC message"),
        (b"x" * 100, "discarded an oversized JSON-RPC line"),
    ]
    assert junk[-1][1] == "discarded an oversized JSON-RPC line (100 bytes, limit 64)"
    invalid = [{"jsonrpc": "2.0", "id": 5, "error": {"code": rpc.INVALID_REQUEST, "message": "Invalid Request"}}]
    assert answers[:-1] == (invalid if answer_junk else [])


@pytest.mark.parametrize("answer_junk", [False, True])
async def test_lines_that_cannot_be_decoded_are_answered_by_the_id_they_carry(answer_junk: bool) -> None:
    """daemon.md §1: an oversized, undecodable or too deeply nested line gets an error reply where it had an id."""
    junk: list[tuple[bytes, str]] = []
    deep = "[" * 100_000 + "]" * 100_000
    async with serving(
        on_junk=lambda line, reason: junk.append((line, reason)), answer_junk=answer_junk, max_line=4 * 1024 * 1024
    ) as (_, peer):
        await peer.send(
            b'{"jsonrpc":"2.0","id":1,"method":"bad\xff"}',  # invalid UTF-8
            b'{"jsonrpc":"2.0","id":"two","method":"m","params":' + b"[" * 2000 + b"]" * 2000 + b"}",
            b'{"jsonrpc":"2.0","id":3,"method":"m","params":"' + b"z" * (5 * 1024 * 1024) + b'"}',
            b'{"jsonrpc":"2.0","method":"m","params":' + deep.encode() + b"}",  # no id: reported only
            b'{"jsonrpc":"2.0","id":"probe","method":"probe"}',
        )
        answers = await peer.read_until("probe")
    assert [reason.split(" (")[0] for _, reason in junk] == [
        "not JSON",
        "JSON nested deeper than 256 levels",
        "discarded an oversized JSON-RPC line",
        "JSON nested deeper than 256 levels",
    ]
    if not answer_junk:
        assert answers[:-1] == []
        return
    assert [(a["id"], a["error"]["code"]) for a in answers[:-1]] == [
        (1, rpc.PARSE_ERROR),
        ("two", rpc.INVALID_REQUEST),
        (3, rpc.INVALID_REQUEST),
    ]
    assert "Invalid UTF-8" in answers[0]["error"]["message"]
    assert "nested deeper than 256 levels" in answers[1]["error"]["message"]
    assert "oversized" in answers[2]["error"]["message"]


# -- typed params (one JSON pass for the hot notification) ---------------------


class _Point(msgspec.Struct):
    x: int


async def test_typed_params_are_decoded_in_the_framing_pass_and_everything_else_is_unchanged() -> None:
    seen: list[Notification] = []
    requests: list[Request] = []

    async def on_notifications(batch: list[Notification]) -> None:
        seen.extend(batch)

    async def on_request(request: Request) -> Any:
        requests.append(request)
        return {}

    options: dict[str, Any] = {"typed": TypedDecoder({"point": _Point})}
    async with serving(on_notifications=on_notifications, on_request=on_request, **options) as (_, peer):
        await peer.send(
            '{"jsonrpc":"2.0","method":"point","params":{"x":1}}',
            '{"method":"point","params":{"x":"not an int"}}',
            '{"method":"other","params":{"x":2}}',
            '{"params":{"x":3},"id":null,"method":"point"}',
        )
        await peer.send('{"jsonrpc":"2.0","id":5,"method":"point","params":{"x":4}}')
        assert (await peer.read())["id"] == 5
    assert [(n.method, n.params, n.decoded) for n in seen] == [
        ("point", None, _Point(1)),
        ("point", msgspec.Raw(b'{"x":"not an int"}'), None),  # invalid: the handler sees the raw params
        ("other", msgspec.Raw(b'{"x":2}'), None),
        ("point", None, _Point(3)),  # a null id is no id: still a notification
    ]
    assert [(r.id, r.method, r.params) for r in requests] == [(5, "point", msgspec.Raw(b'{"x":4}'))]


@pytest.mark.parametrize(
    ("odd", "whole"),
    [
        (None, True),  # every line typed: the read is decoded in one call
        ('{"jsonrpc":"2.0","id":7,"method":"point","params":{"x":9}}', False),  # a request among them
        ('{"method":"point","params":{"x":"no"}}', False),  # params that do not decode
        ('{"method":"point","params":{"x":5,"s":"\\u001f"}}', False),  # the screen sends it to the generic path
        ('{"method":"other","params":{"note":"point","deep":' + "[" * 254 + "]" * 254 + "}}", False),  # not typed
        ("not json", False),
        ('{"method":"point","params":{"x":5,"deep":' + "[" * 300 + "]" * 300 + "}}", False),  # refused, as line by line
    ],
)
async def test_a_read_of_typed_notifications_is_decoded_in_one_call(odd: str | None, whole: bool) -> None:
    """The lines of a read that are all typed notifications decode as one JSON array; any other read takes the line
    by line path, with the same notifications in the same order (a request still answered)."""
    batches: list[list[Notification]] = []
    calls: list[int] = []

    async def on_notifications(batch: list[Notification]) -> None:
        batches.append(batch)

    async def on_request(request: Request) -> Any:
        return {}

    options: dict[str, Any] = {"typed": TypedDecoder({"point": _Point}, screen=scalars.ESCAPED_SEPARATOR.search)}
    async with serving(on_notifications=on_notifications, on_request=on_request, **options) as (conn, peer):
        typed = conn._inbound.typed
        assert typed is not None
        many = typed.many
        typed.many = lambda data: calls.append(1) or many(data)  # type: ignore[func-returns-value]
        lines = [f'{{"jsonrpc":"2.0","method":"point","params":{{"x":{n}}}}}' for n in range(4)]
        await peer.send(*lines[:2], *([odd] if odd else []), *lines[2:])
        if odd and '"id":7' in odd:
            assert (await peer.read())["id"] == 7
        with trio.fail_after(5):
            while sum(n.method == "point" and n.decoded is not None for b in batches for n in b) < 4:
                await trio.sleep(0.01)
    decoded = [n.decoded.x for b in batches for n in b if n.decoded is not None]
    assert decoded == [0, 1, 2, 3]
    if whole:
        assert [len(batch) for batch in batches] == [4]
    assert bool(calls) is (odd is None or ("not json" not in odd and "u001f" not in odd and "[" * 300 not in odd))


async def test_on_result_runs_before_the_notifications_after_the_response() -> None:
    """A result's state change must precede the peer's next notifications (a release before a resume's events),
    even when the awaiting task runs later: `on_result` runs in the reader, in line order."""
    ours, theirs = trio.testing.memory_stream_pair()
    seen: list[str] = []

    async def notes(batch: list[rpc.Notification]) -> None:
        seen.extend(n.method for n in batch)

    conn = rpc.Connection(ours, ours, name="test", on_notifications=notes)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)

        async def peer() -> None:
            request = json.loads((await theirs.receive_some()).split(b"\n")[0])
            before = b'{"jsonrpc":"2.0","method":"before"}\n'
            answer = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {}}).encode() + b"\n"
            await theirs.send_all(before + answer + b'{"jsonrpc":"2.0","method":"after"}\n')

        nursery.start_soon(peer)
        await conn.request_raw("stop", {}, on_result=lambda raw: seen.append("result"))
        with trio.fail_after(5):
            while "after" not in seen:
                await trio.sleep(0.01)
        assert seen == ["before", "result", "after"]
        nursery.cancel_scope.cancel()
