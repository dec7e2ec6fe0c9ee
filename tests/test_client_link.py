"""`bbridge.client` on the wire's JSON-RPC engine (`bbridge.client.link`): framing bounded as the daemon bounds its
clients' lines, an unreadable line refused as the daemon refuses one (the connection goes on, nothing else is lost),
answers correlated by `peer.Calls`, notifications handed typed with their params as sent beside them. Each runs
under trio and under asyncio, against a scripted daemon on the other end of a socket pair."""

from __future__ import annotations

import inspect
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import msgspec
import pytest

from bbridge.client import Client, DaemonError, Notice, Unreadable
from bbridge.daemon import server
from bbridge.wire import client_api as api
from bbridge.wire import openrpc
from bbridge.wire.framing import LineReader
from bbridge.wire.jsonrpc import INVALID_REQUEST, RpcError, recover_answer_id
from bbridge.wire.peer import Calls, Response

BACKENDS = ["trio", "asyncio"]
LIMIT = 1024  # the scripted daemon's lines are bounded this low, so over-long ones stay small
HUGE = "x" * 200_000  # over the bound, and longer than one read of the socket
INITIALIZED = {"daemon": {"name": "scripted", "version": "0"}, "protocolVersion": 1, "grammarVersions": [3, 3],
               "providers": []}  # fmt: skip
EVENTS = {"threadId": "thr_1", "providerId": "echo", "events": [{"seq": 1, "event": {"type": "turn/started"}}]}
OPENED = {"requestId": "req_1", "threadId": "thr_1", "providerId": "echo", "method": "interaction/request",
          "kind": "approval", "params": {"payload": {"kind": "approval"}}, "openedAt": 1.5}  # fmt: skip


class Bounded(Client):
    """The client with a small line bound."""

    max_line = LIMIT


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def answer(ident: Any, result: Any) -> bytes:
    return line({"jsonrpc": "2.0", "id": ident, "result": result})


Script = Callable[["Scripted", dict[str, Any]], Awaitable[None]]


class Scripted:
    """The daemon's end of the socket pair: each message the client sends goes to `script`; `heard` keeps them."""

    def __init__(self, stream: anyio.abc.ByteStream, script: Script) -> None:
        self.stream = stream
        self.script = script
        self.heard: list[dict[str, Any]] = []
        self.changed = anyio.Event()

    async def run(self) -> None:
        reader = LineReader()
        while True:
            try:
                data = await self.stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            for text in reader.feed(data):
                assert isinstance(text, bytes)
                message = json.loads(text)
                self.heard.append(message)
                self.changed.set()
                self.changed = anyio.Event()
                await self.script(self, message)

    async def send(self, *lines: bytes) -> None:
        await self.stream.send(b"".join(lines))

    async def answers(self, count: int) -> list[dict[str, Any]]:
        """The client's first `count` answers to the daemon's requests, once it has sent them."""
        with anyio.fail_after(10):
            while len(found := [m for m in self.heard if "method" not in m]) < count:
                await self.changed.wait()
        return found


async def standard(daemon: Scripted, message: dict[str, Any]) -> None:
    """`initialize` answered; `test/echo` answered with its params; anything else by `test/…`'s own script."""
    if message.get("method") == "initialize":
        await daemon.send(answer(message["id"], INITIALIZED))
    elif message.get("method") == "test/echo":
        await daemon.send(answer(message["id"], message["params"]))


@asynccontextmanager
async def scripted(script: Script, *, on_request: Any = None) -> AsyncIterator[tuple[Client, Scripted]]:
    ours, theirs = socket.socketpair()
    daemon = Scripted(await anyio.abc.UNIXSocketStream.from_socket(theirs), script)
    with anyio.fail_after(10):  # a request nobody settles fails the test, not hangs it
        async with anyio.create_task_group() as group:
            group.start_soon(daemon.run)
            stream = await anyio.abc.UNIXSocketStream.from_socket(ours)
            async with Bounded.over(stream, on_request=on_request) as client:
                yield client, daemon
            group.cancel_scope.cancel()
    await daemon.stream.aclose()


def test_the_client_bounds_lines_as_the_daemon_bounds_its_clients() -> None:
    daemon_bound = inspect.signature(server.ClientConnection).parameters["max_line"].default
    assert Client.max_line == daemon_bound


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_over_long_answer_fails_its_request_clearly_and_the_connection_goes_on(backend: str) -> None:
    async def script(daemon: Scripted, message: dict[str, Any]) -> None:
        if message.get("method") == "test/big":  # in pieces, the next answer in the same write as its tail
            big = answer(message["id"], HUGE)
            await daemon.send(big[:70_000])
            await daemon.send(big[70_000:], answer(message["id"] + 100, "a stray answer"))
        else:
            await standard(daemon, message)

    async def main() -> None:
        async with scripted(script) as (client, _):
            with pytest.raises(Unreadable) as unreadable:
                await client.request("test/big", {})
            assert isinstance(unreadable.value, DaemonError) and unreadable.value.code == INVALID_REQUEST
            size = len(answer(0, HUGE)) - 1  # the line without its terminator (the id's width is the same)
            assert unreadable.value.message == (
                "test/big: the daemon's answer was unreadable: discarded an oversized JSON-RPC line "
                f"({size} bytes, limit {LIMIT})"
            )
            assert await client.request("test/echo", {"still": "here"}) == {"still": "here"}

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_over_long_notification_is_dropped_alone(backend: str) -> None:
    async def script(daemon: Scripted, message: dict[str, Any]) -> None:
        if message.get("method") == "test/notify":
            huge = {**EVENTS, "events": [{"seq": 1, "event": {"type": "x", "text": HUGE}}]}
            await daemon.send(
                line({"jsonrpc": "2.0", "method": "thread/events", "params": huge}),
                line({"jsonrpc": "2.0", "method": "thread/events", "params": EVENTS}),
                b"not json\n",
                line({"jsonrpc": "2.0", "method": "interaction/opened", "params": OPENED}),
                answer(message["id"], {}),
            )
        else:
            await standard(daemon, message)

    async def main() -> list[Notice]:
        async with scripted(script) as (client, _):
            await client.request("test/notify", {})
            notes = []
            async for note in client.notifications():
                notes.append(note)
                if note.method == "interaction/opened":
                    return notes
        raise AssertionError("the connection ended")

    notes = anyio.run(main, backend=backend)
    assert [note.method for note in notes] == ["thread/events", "interaction/opened"]
    assert notes[0].raw == EVENTS and notes[1].raw == OPENED


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_over_long_request_is_answered_by_its_id_as_the_daemon_answers_one(backend: str) -> None:
    """A request whose id reads from its head is answered `-32600`; the next request is answered by the handler."""
    asked: list[tuple[str, dict[str, Any]]] = []

    async def on_request(method: str, params: dict[str, Any]) -> Any:
        asked.append((method, params))
        return {"decision": "deny"}

    async def script(daemon: Scripted, message: dict[str, Any]) -> None:
        if message.get("method") == "test/ask":
            await daemon.send(
                line({"jsonrpc": "2.0", "id": "big-1", "method": "interaction/request", "params": {"text": HUGE}}),
                line({"jsonrpc": "2.0", "id": "ask-2", "method": "interaction/request", "params": {"text": "hi"}}),
                answer(message["id"], {}),
            )
        else:
            await standard(daemon, message)

    async def main() -> list[dict[str, Any]]:
        async with scripted(script, on_request=on_request) as (client, daemon):
            await client.request("test/ask", {})
            return await daemon.answers(2)

    by_id = {message["id"]: message for message in anyio.run(main, backend=backend)}
    refused, answered = by_id["big-1"], by_id["ask-2"]
    assert refused["error"]["code"] == INVALID_REQUEST
    assert "oversized JSON-RPC line" in refused["error"]["message"]
    assert answered == {"jsonrpc": "2.0", "id": "ask-2", "result": {"decision": "deny"}}
    assert asked == [("interaction/request", {"text": "hi"})]


@pytest.mark.parametrize("backend", BACKENDS)
def test_answers_meet_their_requests_by_id(backend: str) -> None:
    """Answered out of order, each request gets its own answer; an error answer is a `DaemonError` with the
    daemon's code, message and data; an answer to an id nobody asked with changes nothing."""
    held: list[dict[str, Any]] = []

    async def script(daemon: Scripted, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method == "test/slow":
            held.append(message)
        elif method == "test/fast":
            await daemon.send(answer(987_654, "nobody asked"), answer(message["id"], "fast"))
            await daemon.send(answer(held[0]["id"], "slow"))
        elif method == "test/refuse":
            error = {"code": -32020, "message": "already resolved", "data": {"answeredBy": "socket-1"}}
            await daemon.send(line({"jsonrpc": "2.0", "id": message["id"], "error": error}))
        else:
            await standard(daemon, message)

    async def main() -> dict[str, Any]:
        results: dict[str, Any] = {}

        async def ask(method: str) -> None:
            results[method] = await client.request(method, {})

        async with scripted(script) as (client, _):
            async with anyio.create_task_group() as group:
                group.start_soon(ask, "test/slow")
                with anyio.fail_after(10):
                    while not held:
                        await anyio.sleep(0.01)
                group.start_soon(ask, "test/fast")
            with pytest.raises(DaemonError) as refused:
                await client.request("test/refuse", {})
            assert not isinstance(refused.value, Unreadable)
            assert (refused.value.code, refused.value.message) == (-32020, "already resolved")
            assert refused.value.data == {"answeredBy": "socket-1"}
            results["echo"] = await client.request("test/echo", [1])
        return results

    assert anyio.run(main, backend=backend) == {"test/slow": "slow", "test/fast": "fast", "echo": [1]}


def test_a_notice_is_typed_with_its_params_as_sent_beside() -> None:
    events = Notice.of("thread/events", EVENTS)
    assert isinstance(events.params, api.ThreadEventsNotification) and events.raw == EVENTS
    assert events.params.events == [api.Entry(seq=1, event={"type": "turn/started"})]
    opened = Notice.of("interaction/opened", OPENED)
    assert isinstance(opened.params, api.InteractionOpenedParams) and opened.params.kind == "approval"
    resolved = {**{k: v for k, v in OPENED.items() if k != "params"}, "resolvedAt": 2.0, "resolvedBy": "daemon:timeout"}
    assert isinstance(Notice.of("interaction/resolved", resolved).params, api.Resolution)
    assert Notice.of("later/method", {"a": 1}) == Notice("later/method", None, {"a": 1})  # not known: raw only
    assert Notice.of("bridge/status", {"state": 3}).params is None  # params that do not decode: raw only


def test_every_notification_the_api_describes_is_decoded_typed() -> None:
    assert list(openrpc.NOTIFICATION_SUMMARIES) == list(api.NOTIFICATION_PARAMS)
    assert {name: kind for name, (kind, _) in openrpc.NOTIFICATIONS.items()} == api.NOTIFICATION_PARAMS


@pytest.mark.parametrize(
    ("head", "answers"),
    [
        (b'{"jsonrpc":"2.0","id":7,"result":"xxx', 7),
        (b'{"jsonrpc":"2.0","id":"a","error":{"code":1', "a"),
        (b'{"jsonrpc":"2.0","method":"x","params":{"id":3,"result":', None),  # a notification
        (b'{"jsonrpc":"2.0","id":4,"method":"interaction/request","params":{', None),  # a request: recover_id's
        (b'{"jsonrpc":"2.0","result":{"id":5}', None),  # no id before the nesting
        (b"[1, 2", None),
    ],
)  # fmt: skip
def test_an_unreadable_answer_s_id(head: bytes, answers: Any) -> None:
    assert recover_answer_id(head) == answers


def test_calls_fail_one_call_by_id() -> None:
    woken: list[int] = []
    calls = Calls("test")
    first, call = calls.open(None, lambda: woken.append(1))
    second, other = calls.open(None, lambda: woken.append(2))
    assert calls.fail(first, RpcError(INVALID_REQUEST, "unreadable")) is call
    assert call.done and call.error is not None and call.error.message == "unreadable" and woken == [1]
    assert calls.fail(first, RpcError(INVALID_REQUEST, "again")) is None  # settled once; then unknown
    assert calls.answer(Response(second, msgspec.Raw(b"1"), msgspec.Raw())) is other and bytes(other.result) == b"1"
