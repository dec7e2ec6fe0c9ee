"""An in-process daemon behind a `--listen` face on 127.0.0.1, and raw HTTP and WebSocket peers for its tests."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import trio
from wsproto.events import BytesMessage

from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.runtime import Daemon
from bbridge.daemon.server import Face, serve, socket_face
from bbridge.listen.admission import Address
from bbridge.listen.face import Bound, ListenSettings, listen_face
from bbridge.wire.websocket import ClientHandshake, MessageLines

TOKEN = "s3cret-token-for-tests"


@dataclass
class Listening:
    daemon: Daemon
    port: int
    tls: bool = False

    @property
    def url(self) -> str:
        """The client API's WebSocket URL."""
        return f"{'wss' if self.tls else 'ws'}://127.0.0.1:{self.port}/rpc"


@asynccontextmanager
async def listening(
    providers: dict[str, ProviderConfig],
    settings: ListenSettings | None = None,
    *,
    port: int = 0,
    socket: Path | None = None,
    faces: Sequence[Face] = (),
    **options: Any,
) -> AsyncIterator[Listening]:
    """The daemon serving one listener on loopback: a free port, or `port` (a restarted daemon's); `settings`
    without an address; with `socket`, a Unix socket beside it; `faces` beside them (a room's in-process face,
    `bbridge.serving.room_face`, with the room among `options`' `services`)."""
    options.setdefault("text_delta_flush_ms", 0)
    options.setdefault("token", TOKEN)
    daemon = Daemon(providers, **options)
    bound = Bound()
    settings = replace(settings or ListenSettings(Address("127.0.0.1", 0)), address=Address("127.0.0.1", port))
    async with trio.open_nursery() as nursery:
        every = [listen_face(settings, bound), *([socket_face(socket)] if socket is not None else []), *faces]
        await nursery.start(serve, daemon, every)
        try:
            yield Listening(daemon, bound.ports[0], settings.tls is not None)
        finally:
            daemon.request_shutdown()
            with trio.fail_after(20):
                await daemon.stopped.wait()


async def http_get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One plain request: status, headers (lowercased names), body."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    head = {"Host": f"127.0.0.1:{port}", **(headers or {})}
    request = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items()) + "\r\n"
    async with stream:
        await stream.send_all(request.encode("latin-1"))
        return parse_response(await read_all(stream))


async def read_all(stream: trio.abc.ReceiveStream) -> bytes:
    data = bytearray()
    with trio.fail_after(10):
        while chunk := await stream.receive_some():
            data += chunk
    return bytes(data)


def parse_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body


class WsPeer:
    """A WebSocket client on bbridge's own sans-IO frames, for what a third-party client would not do on purpose
    (binary frames, oversized messages, silence)."""

    def __init__(self, stream: trio.SocketStream, lines: MessageLines, rest: bytes) -> None:
        self.stream = stream
        self.lines = lines
        self._buffer = bytearray(rest)
        self._held: deque[dict[str, Any]] = deque()
        self._held: deque[dict[str, Any]] = deque()

    @classmethod
    async def connect(cls, port: int, headers: dict[str, str] | None = None, host: str | None = None) -> WsPeer:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        handshake = ClientHandshake(host or f"127.0.0.1:{port}", "/rpc", list((headers or {}).items()))
        await stream.send_all(handshake.request)
        with trio.fail_after(10):
            while True:
                data = await stream.receive_some()
                lines = handshake.feed(bytes(data) or None)
                if lines is not None:
                    return cls(stream, lines, b"")

    async def send(self, message: dict[str, Any] | bytes) -> None:
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        await self.stream.send_all(self.lines.frame(line))

    async def send_binary(self, data: bytes) -> None:
        """A binary message, which the client API does not read."""
        await self.stream.send_all(self.lines._ws.send(BytesMessage(data=data)))  # bbridge itself never sends one

    async def call(self, request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
        while True:
            message = await self._next()
            if message is None:
                raise EOFError(f"the connection closed before {method} was answered")
            if message.get("id") == request_id and "method" not in message:
                return message
            self._held.append(message)  # read before the answer: `receive` gives it next

    async def receive(self, timeout: float = 10) -> dict[str, Any] | None:
        """The next message other than the answers `call` took (None once the server closed)."""
        return self._held.popleft() if self._held else await self._next(timeout)

    async def _next(self, timeout: float = 10) -> dict[str, Any] | None:
        with trio.fail_after(timeout):
            while b"\n" not in self._buffer:
                data = await self.stream.receive_some()
                got = self.lines.receive(bytes(data) or None)
                if got.reply:
                    await self.stream.send_all(got.reply)
                self._buffer += got.lines
                if (got.closed or not data) and b"\n" not in self._buffer:
                    return None
            line, _, rest = bytes(self._buffer).partition(b"\n")
            self._buffer = bytearray(rest)
            decoded: dict[str, Any] = json.loads(line)
            return decoded

    async def aclose(self) -> None:
        await self.stream.aclose()
