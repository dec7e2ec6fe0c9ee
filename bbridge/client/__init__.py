"""A Python client of the daemon's API (`clients/openrpc.json`), on anyio: it runs under trio and asyncio alike.

    async with Client.connect("/run/bbridge.sock", token=token) as client:
        await client.request("thread/start", {...})
        async for entry in client.events("thr_1"):          # resumes by itself after a dropped connection
            print(entry.seq, entry.event["type"])

* `Client.connect(path, token=...)` opens the Unix socket and sends `initialize`; `Client.connect(url, ...)`
  with a `ws://` or `wss://` URL (a `str`) reaches a `bbridge serve --listen` over WebSocket instead
  (`ca_file`: the certificates a `wss://` server's is checked against, else the system's; the token goes both
  as `Authorization: Bearer` on the upgrade and in `initialize`); `Client.spawn(argv)` runs `bbridge serve` (or
  anything speaking the API) on its stdio, its stderr this process's; `Client.over(stream)` talks to a daemon
  already connected on a byte stream (an in-process daemon's end of a socket pair). An error comes out of each block as
  itself, not in an exception group: `OSError` when nothing listens, `DaemonError` when `initialize` or the
  WebSocket upgrade is refused (`errors.UNAUTHORIZED`: a wrong or missing token) or a call inside the block is.
* Calls are typed with the daemon's own wire types (`bbridge.wire.client_api`): `initialize`, `status`,
  `thread_events`, `pending`, `respond`; any other method through `request`. A refusal is a `DaemonError`
  carrying the daemon's code (`bbridge.wire.errors`), its message and, in its text, the reason the error's
  `data` gives (a -32602's `[{path, message}]`); a call on a connection that has ended fails at once with
  `Disconnected`.
* `turn/start` and `turn/steer` need a `clientRequestId` (`^creq_[23456789a-km-z]{10}$`; the events'
  `turn/input/accepted` carries it back): `request` mints one (`client_request_id()`) when the params leave it
  out. Mint it yourself to know which `turn/input/accepted` is your input's.
* `events(thread_id, after_seq=0)` yields a thread's events once each, in `seq` order: the journal's replay,
  then the live `thread/events`; when the connection drops (the daemon restarted, with `--journal`) it
  reconnects (bounded retries) and resumes after the last `seq` it yielded — no gap, no duplicate.
* `notifications()` yields every notification of the current connection (`thread/events`, `bridge/status`,
  `interaction/opened`, ...) in the order the daemon sent them, from the connection's opening, until it closes
  (no reconnect). It reads the queue `events` reads: iterate one of them at a time.
* Relayed bridge requests (`interaction/request`, `item/tool/call`) go to `on_request`, whose return value
  is the answer; with none, or when the handler returns `LEAVE`, the request is not answered and stays pending
  for any client's `interaction/respond` (an error answer would resolve it).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import secrets
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import anyio
import anyio.abc
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from anyio.streams.stapled import StapledByteStream

from bbridge.wire import client_api as api
from bbridge.wire import errors
from bbridge.wire.websocket import ClientHandshake, HandshakeError, MessageLines

LEAVE = object()  # an `on_request` answer: not mine, leave it pending for another client
RETRIES = 50
RETRY_S = 0.1
REASON_MAX = 500  # characters of an error's `data` shown in its text
CLIENT_REQUEST_ID_ALPHABET = "23456789abcdefghijkmnpqrstuvwxyz"  # protocol.md §3.2: no 0, 1, l or o
MINTS_CLIENT_REQUEST_ID = ("turn/start", "turn/steer")  # the daemon methods whose params need one
URL_SCHEMES = ("ws", "wss")
RPC_PATH = "/rpc"  # where `bbridge serve --listen` upgrades to the client API
READ_BYTES = 65536
HANDSHAKE_S = 10.0  # the bound of a WebSocket connection's opening: TCP, TLS and the upgrade
CLOSE_S = 1.0  # how long a WebSocket close frame may take before the connection is closed anyway
Handler = Callable[[str, dict[str, Any]], Awaitable[Any]]


def client_request_id() -> str:
    """A fresh `clientRequestId` for `turn/start` or `turn/steer`: `creq_` and 10 random characters of the
    protocol's alphabet (50 bits), the form the bridges refuse any other of (`-32602`)."""
    return "creq_" + "".join(secrets.choice(CLIENT_REQUEST_ID_ALPHABET) for _ in range(10))


def error_reason(data: Any) -> str:
    """A refusal's reason from its `data`, one line: a -32602's `[{path, message}]` issues (what the bridges'
    kit sends) as `path.to.field: message`, a string as itself, anything else as compact JSON."""
    if data is None:
        return ""
    if isinstance(data, list) and data and all(isinstance(issue, dict) and "message" in issue for issue in data):
        parts = []
        for issue in data:
            path = issue.get("path")
            dotted = ".".join(map(str, path)) if isinstance(path, list) else ""
            parts.append(f"{dotted}: {issue['message']}" if dotted else str(issue["message"]))
        text = "; ".join(parts)
    else:
        text = data if isinstance(data, str) else msgspec.json.encode(data).decode()
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


class DaemonError(Exception):
    """The daemon refused a request: its JSON-RPC error code, message and data; the text adds the reason `data`
    gives (`Invalid params for turn/start (-32602): clientRequestId: Expected ...`)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        reason = error_reason(data)
        super().__init__(f"{message} ({code})" + (f": {reason}" if reason else ""))
        self.code, self.message, self.data = code, message, data


class Disconnected(DaemonError):
    """The connection ended with the request outstanding."""

    def __init__(self, message: str = "the daemon closed the connection") -> None:
        super().__init__(-32099, message)


@dataclass(frozen=True)
class Entry:
    threadId: str
    seq: int
    event: dict[str, Any]


@dataclass(frozen=True)
class Notification:
    method: str
    params: dict[str, Any]


class Client:
    """One client of the daemon, alive inside `async with Client.connect(...)` (or `Client.spawn(...)`)."""

    # what `initialize` says this client is (the daemon names it in `interaction/resolved`): a subclass names itself
    client_info: ClassVar[dict[str, str]] = {"name": "bbridge.client", "version": "0.1.0"}

    def __init__(
        self,
        group: anyio.abc.TaskGroup,
        opener: Callable[[], Awaitable[anyio.abc.ByteStream]],
        token: str | None,
        on_request: Handler | None,
        reconnects: bool,
    ) -> None:
        self._group, self._opener, self._token = group, opener, token
        self._on_request = on_request
        self._reconnects = reconnects
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._write_lock = anyio.Lock()
        self._stream: anyio.abc.ByteStream | None = None
        self._notes: MemoryObjectReceiveStream[dict[str, Any]] | None = None

    # -- opening ----------------------------------------------------------------------------------------------

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        where: str | Path,
        *,
        token: str | None = None,
        on_request: Handler | None = None,
        ca_file: str | Path | None = None,
    ) -> AsyncIterator[Client]:
        """The daemon on a Unix socket (a path), or at a `ws://` or `wss://` URL (a `str`: `bbridge serve
        --listen`, `/rpc` when the URL names no path); `events` reconnects to it when the connection drops."""
        url = urlsplit(where) if isinstance(where, str) and is_url(where) else None
        if url is None and ca_file is not None:
            raise ValueError(f"ca_file is for a wss:// URL, not the Unix socket {where}")
        opener = _socket_opener(Path(where)) if url is None else _websocket_opener(str(where), token, ca_file)
        async with cls._session(opener, token, on_request, reconnects=True) as client:
            yield client

    @classmethod
    @contextlib.asynccontextmanager
    async def spawn(cls, argv: Sequence[str], *, on_request: Handler | None = None) -> AsyncIterator[Client]:
        """The daemon (`bbridge serve`) as a child on stdio; it ends when the client's block does. Its stderr
        (the daemon's logs) is this process's: a pipe nobody reads would fill and stall it."""
        process = await anyio.open_process(list(argv), stderr=None)
        assert process.stdin is not None and process.stdout is not None
        stream = StapledByteStream(process.stdin, process.stdout)

        async def opener() -> anyio.abc.ByteStream:
            return stream

        try:
            async with cls._session(opener, None, on_request, reconnects=False) as client:
                yield client
        finally:
            with anyio.CancelScope(shield=True):
                await process.aclose()

    @classmethod
    @contextlib.asynccontextmanager
    async def over(
        cls, stream: anyio.abc.ByteStream, *, token: str | None = None, on_request: Handler | None = None
    ) -> AsyncIterator[Client]:
        """A daemon already connected on `stream` (an in-process daemon's end of a socket pair, as `bbridge acp`
        runs it); the block ends with the connection, which is never reopened."""

        async def opener() -> anyio.abc.ByteStream:
            return stream

        async with cls._session(opener, token, on_request, reconnects=False) as client:
            yield client

    @classmethod
    @contextlib.asynccontextmanager
    async def _session(
        cls, opener: Callable[[], Awaitable[anyio.abc.ByteStream]], token: str | None, on_request: Handler | None,
        *, reconnects: bool,
    ) -> AsyncIterator[Client]:  # fmt: skip
        failure: Exception | None = None
        try:
            async with anyio.create_task_group() as group:
                client = cls(group, opener, token, on_request, reconnects)
                await client._open()
                try:
                    yield client
                finally:
                    group.cancel_scope.cancel()
                    if client._stream is not None:
                        with anyio.CancelScope(shield=True):
                            await client._stream.aclose()
        except BaseExceptionGroup as grouped:
            failure = _single(grouped)
            if failure is None:
                raise
        if failure is not None:
            raise failure  # the block's (or the connection's) one error, as itself

    async def _open(self) -> None:
        """A (new) connection: its reader in the client's task group, then `initialize`."""
        stream = await self._opener()
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
        self._stream, self._notes = stream, receive
        self._group.start_soon(self._read, stream, send)
        await self.initialize(self._token)

    # -- calls ------------------------------------------------------------------------------------------------

    async def request(self, method: str, params: Any = None) -> Any:
        """The result of one request; `DaemonError` with the daemon's code when it refuses. A `turn/start` or
        `turn/steer` without a `clientRequestId` gets a fresh one (the caller's params are not changed)."""
        if method in MINTS_CLIENT_REQUEST_ID and isinstance(params, dict) and params.get("clientRequestId") is None:
            params = {**params, "clientRequestId": client_request_id()}
        ident = next(self._ids)
        done = anyio.Event()
        box: list[Any] = []
        self._pending[ident] = (done, box)
        try:
            await self._write({"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}})
            await done.wait()
        finally:
            self._pending.pop(ident, None)
        message = box[0]
        if "error" in message:
            error = message["error"] or {}
            if error.get("code") == Disconnected().code:
                raise Disconnected()
            raise DaemonError(int(error.get("code", -32603)), str(error.get("message", "")), error.get("data"))
        return message.get("result")

    async def initialize(self, token: str | None = None) -> api.DaemonInitializeResult:
        params: dict[str, Any] = {"client": dict(self.client_info), "protocolVersion": 1}
        if token is not None:
            params["token"] = token
        return msgspec.convert(await self.request("initialize", params), api.DaemonInitializeResult)

    async def status(self) -> api.DaemonStatus:
        return msgspec.convert(await self.request("daemon/status"), api.DaemonStatus)

    async def thread_events(self, thread_id: str, after_seq: int = 0) -> api.ThreadEventsResult:
        result = await self.request("thread/events", {"threadId": thread_id, "afterSeq": after_seq})
        return msgspec.convert(result, api.ThreadEventsResult)

    async def pending(self, thread_id: str | None = None) -> api.ThreadPendingResult:
        result = await self.request("thread/pending", {} if thread_id is None else {"threadId": thread_id})
        return msgspec.convert(result, api.ThreadPendingResult)

    async def respond(
        self, request_id: str, result: Any = None, *, error: tuple[int, str] | None = None, warning: str | None = None
    ) -> None:
        """Answer a pending request; `warning` also goes on its thread as a `provider/warning` event."""
        answer: dict[str, Any] = {"requestId": request_id}
        if error is not None:
            answer["error"] = {"code": error[0], "message": error[1]}
        else:
            answer["result"] = result
        if warning is not None:
            answer["warning"] = warning
        await self.request("interaction/respond", answer)

    # -- events -----------------------------------------------------------------------------------------------

    async def events(self, thread_id: str, after_seq: int = 0) -> AsyncIterator[Entry]:
        """The thread's events after `after_seq`, each once and in order, across reconnects."""
        async for entry in self.timelines({thread_id: after_seq}):
            yield entry

    async def timelines(self, after: Mapping[str, int]) -> AsyncIterator[Entry]:
        """Several threads' events on this one connection, each thread's after its seq in `after`: each event once
        and in order per thread, across reconnects (each thread replays from its last seq on the new
        connection, then follows live)."""
        last = dict(after)
        while True:
            try:
                async for entry in self._follow(last):
                    yield entry
            except (Disconnected, OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            if not self._reconnects:
                return
            await _retry(self._open)

    async def notifications(self) -> AsyncIterator[Notification]:
        """Every notification of the current connection, in order, until it closes."""
        assert self._notes is not None
        async for note in self._notes:
            yield Notification(str(note.get("method")), note.get("params") or {})

    async def _follow(self, last: dict[str, int]) -> AsyncIterator[Entry]:
        """Replay, then follow live, the threads in `last`, advancing it past each event given."""
        for thread_id in list(last):
            replay = await self.thread_events(thread_id, last[thread_id])
            for item in replay.events:
                if item.seq > last[thread_id]:
                    last[thread_id] = item.seq
                    yield Entry(thread_id, item.seq, item.event)
        assert self._notes is not None
        async for note in self._notes:
            params = note.get("params") or {}
            followed = params.get("threadId")
            if note.get("method") != "thread/events" or followed not in last:
                continue
            for item in params.get("events", []):
                if item["seq"] > last[followed]:
                    last[followed] = item["seq"]
                    yield Entry(followed, item["seq"], item["event"])
        raise Disconnected()

    # -- the wire ---------------------------------------------------------------------------------------------

    async def _write(self, message: dict[str, Any]) -> None:
        async with self._write_lock:
            stream = self._stream  # None from the moment the connection's reader ended until a reconnect
            if stream is None:
                raise Disconnected()
            try:
                await stream.send(msgspec.json.encode(message) + b"\n")
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                raise Disconnected() from None

    async def _read(self, stream: anyio.abc.ByteStream, notes: MemoryObjectSendStream[dict[str, Any]]) -> None:
        buffer = b""
        try:
            while True:
                try:
                    data = await stream.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    break
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        await self._dispatch(msgspec.json.decode(line), notes)
        finally:
            if stream is self._stream:  # a reconnect's requests are not this connection's
                # before any await: a request written from now on would wait on a dead connection forever
                self._stream = None
                for done, box in list(self._pending.values()):
                    box.append({"error": {"code": Disconnected().code, "message": "disconnected"}})
                    done.set()
            notes.close()
            with anyio.CancelScope(shield=True):
                await stream.aclose()  # a later call fails at once (Disconnected), not waiting for an answer

    async def _dispatch(self, message: dict[str, Any], notes: MemoryObjectSendStream[dict[str, Any]]) -> None:
        if "method" not in message:
            slot = self._pending.get(message.get("id"))  # type: ignore[arg-type]
            if slot is not None:
                slot[1].append(message)
                slot[0].set()
        elif "id" in message:
            assert self._group is not None
            self._group.start_soon(self._answer, message)
        else:
            await notes.send(message)

    async def _answer(self, message: dict[str, Any]) -> None:
        answer: Any = LEAVE
        if self._on_request is not None:
            answer = await self._on_request(message["method"], message.get("params") or {})
        if answer is LEAVE:
            return  # unanswered: pending for whoever answers it with interaction/respond
        with contextlib.suppress(Disconnected):  # the daemon went away: it keeps the request pending
            await self._write({"jsonrpc": "2.0", "id": message["id"], "result": answer})


def is_url(where: str) -> bool:
    """Whether `Client.connect` reads `where` as a WebSocket URL (`ws://`, `wss://`) rather than a socket path."""
    return urlsplit(where).scheme in URL_SCHEMES and "://" in where


def unreachable(where: str | Path, exc: OSError) -> str:
    """Why connecting to `where` failed, in one line; an untrusted TLS certificate says what to give."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the TLS certificate of {where} is not trusted ({exc.verify_message}): give its CA (--ca-file)"
    if exc.strerror is None and isinstance(exc.__cause__, OSError):  # anyio's "All connection attempts failed"
        exc = exc.__cause__
    return f"no daemon is listening on {where} ({exc.strerror or exc})"


def _socket_opener(path: Path) -> Callable[[], Awaitable[anyio.abc.ByteStream]]:
    async def opener() -> anyio.abc.ByteStream:
        return await anyio.connect_unix(path)

    return opener


def _websocket_opener(
    url: str, token: str | None, ca_file: str | Path | None
) -> Callable[[], Awaitable[anyio.abc.ByteStream]]:
    """Each connection: TCP (TLS for `wss://`), the upgrade with the bearer token, then lines over frames."""
    parts = urlsplit(url)
    if parts.hostname is None:
        raise ValueError(f"{url}: the URL names no host (expected ws://HOST:PORT or wss://HOST:PORT)")
    if parts.scheme == "ws" and ca_file is not None:
        raise ValueError(f"{url}: ca_file is for a wss:// URL (a ws:// connection has no TLS)")
    secure = parts.scheme == "wss"
    host, port = parts.hostname, parts.port or (443 if secure else 80)
    target = (parts.path if parts.path not in ("", "/") else RPC_PATH) + (f"?{parts.query}" if parts.query else "")
    authority = f"[{host}]" if ":" in host else host
    authority += f":{parts.port}" if parts.port is not None else ""
    headers = [("Authorization", f"Bearer {token}")] if token is not None else []
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file is not None else None) if secure else None

    async def connect() -> anyio.abc.ByteStream:
        transport: anyio.abc.ByteStream = (
            await anyio.connect_tcp(host, port)
            if context is None
            else await anyio.connect_tcp(host, port, ssl_context=context, tls_standard_compatible=False)
        )
        try:
            return await _upgrade(transport, ClientHandshake(authority, target, headers))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await transport.aclose()
            raise

    async def opener() -> anyio.abc.ByteStream:
        try:
            with anyio.fail_after(HANDSHAKE_S):  # a silent host, a stalled TLS handshake or upgrade
                return await connect()
        except TimeoutError:
            raise TimeoutError(f"no WebSocket connection within {HANDSHAKE_S:g}s") from None

    return opener


async def _upgrade(transport: anyio.abc.ByteStream, handshake: ClientHandshake) -> anyio.abc.ByteStream:
    """The WebSocket upgrade; a refusal is a `DaemonError` naming the status and what to do."""
    await transport.send(handshake.request)
    while True:
        try:
            data: bytes | None = await transport.receive(READ_BYTES)
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            data = None
        try:
            lines = handshake.feed(data)
        except HandshakeError as refused:
            raise _refusal(refused) from None
        if lines is not None:
            return WebSocketStream(transport, lines)


UPGRADE_HINTS = {  # what a refused upgrade's error says to do, by its status
    401: "pass the token in the daemon's serve --token-file",
    403: "connect by the address the daemon listens on, or have it allow yours (serve --allow-host, --allow-origin)",
}


def _refusal(refused: HandshakeError) -> DaemonError:
    """401 and 403 are `UNAUTHORIZED`; anything else (503: too many connections, a close mid-handshake) a
    `Disconnected`, which a reconnect retries."""
    if refused.status in UPGRADE_HINTS:
        return DaemonError(errors.UNAUTHORIZED, f"{refused}; {UPGRADE_HINTS[refused.status]}")
    return Disconnected(f"{refused}; check the URL: bbridge serve --listen upgrades GET /rpc")


class WebSocketStream(anyio.abc.ByteStream):
    """A client's WebSocket connection as the byte stream of newline-delimited JSON-RPC the client reads and
    writes: each text message one line, each line one text frame (`wire.websocket.MessageLines`); pings are
    answered as they arrive."""

    def __init__(self, transport: anyio.abc.ByteStream, lines: MessageLines) -> None:
        self._transport = transport
        self._lines = lines
        self._send_lock = anyio.Lock()
        self._flushed = False

    async def receive(self, max_bytes: int = READ_BYTES) -> bytes:
        while True:
            if not self._flushed:  # what came in the same read as the server's 101, held by wsproto
                self._flushed, data = True, b""
            else:
                try:
                    data = await self._transport.receive(READ_BYTES)
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    data = None
            got = self._lines.receive(data)
            if got.reply:
                await self._write(got.reply)
            if got.lines:
                return got.lines
            if got.closed or data is None:
                raise anyio.EndOfStream

    async def send(self, item: bytes) -> None:
        await self._write(self._lines.frames(item))

    async def send_eof(self) -> None:
        await self._write(self._lines.close(1000))

    async def aclose(self) -> None:
        with (
            anyio.move_on_after(CLOSE_S, shield=True),
            contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError),
        ):
            await self._write(self._lines.close(1000))
        await self._transport.aclose()

    async def _write(self, raw: bytes) -> None:
        if raw:
            async with self._send_lock:
                await self._transport.send(raw)


def _single(grouped: BaseExceptionGroup[BaseException]) -> Exception | None:
    """The task group's one error when it holds exactly one (not a cancellation, not a group of its own)."""
    if len(grouped.exceptions) != 1:
        return None
    only = grouped.exceptions[0]
    return only if isinstance(only, Exception) and not isinstance(only, BaseExceptionGroup) else None


async def _retry(open_: Callable[[], Awaitable[None]]) -> None:
    """Reconnect, bounded: `RETRIES` attempts `RETRY_S` apart (a daemon restarting takes a moment)."""
    for attempt in range(RETRIES):
        try:
            await open_()
            return
        except (OSError, Disconnected):
            if attempt == RETRIES - 1:
                raise
            await anyio.sleep(RETRY_S)
