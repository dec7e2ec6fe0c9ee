"""bbridge.wire.rpc: peer errors, failing handlers, and junk lines (reported, answered by the id they carry)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from bbridge.wire import rpc
from bbridge.wire.rpc import Request, RpcError
from tests.rpc_peers import linked, refused, serving

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
