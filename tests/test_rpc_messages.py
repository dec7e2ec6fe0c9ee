"""bbridge.wire.rpc: what a `Connection` writes, and how it classifies and answers what it reads.

Its sans-IO parts are tests/test_framing.py and tests/test_jsonrpc.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from bbridge.wire import rpc
from bbridge.wire.rpc import Connection, Notification, Request, RpcError
from tests.rpc_peers import linked, params_of, serving

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


async def test_request_raw_leaves_the_result_undecoded() -> None:
    async with linked({"on_request": lambda r: _const({"providerThreadId": "p"})}) as (client, _):
        raw = await client.request_raw("thread/start")
        assert bytes(raw) == b'{"providerThreadId":"p"}'
