"""bbridge.wire.rpc: a read's notifications in one call and in wire order, and typed params decoded in the
framing pass (the hot `thread/delta` path).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from bbridge.core import scalars
from bbridge.wire import rpc
from bbridge.wire.delta_decoder import TypedDecoder
from bbridge.wire.rpc import Notification, Request
from tests.rpc_peers import serving

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

    options: dict[str, Any] = {"typed": TypedDecoder("point", _Point)}
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
        ('{"method":"point","params":{"x":8}},{"method":"point","params":{"x":9}}', False),  # two values: refused
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

    options: dict[str, Any] = {"typed": TypedDecoder("point", _Point, screen=scalars.ESCAPED_SEPARATOR.search)}
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
    # the screen and the depth check keep a read from the one-call decode; anything else is tried and falls back
    assert bool(calls) is (odd is None or ("u001f" not in odd and "[" * 300 not in odd))


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
