"""The client's WebSocket transport (`Client.connect("ws://…" | "wss://…")`): TCP (TLS for `wss://`), the upgrade
with the bearer token, then the same JSON-RPC lines as on a socket, over the shared sans-IO
`bbridge.wire.websocket` (wsproto). A refused upgrade is the wire's `HandshakeError`, which `bbridge.client` says
in its own terms."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import anyio.abc

from bbridge.wire.websocket import ClientHandshake, MessageLines

URL_SCHEMES = ("ws", "wss")
RPC_PATH = "/rpc"  # where `bbridge serve --listen` upgrades to the client API
READ_BYTES = 65536
HANDSHAKE_S = 10.0  # the bound of a WebSocket connection's opening: TCP, TLS and the upgrade
CLOSE_S = 1.0  # how long a WebSocket close frame may take before the connection is closed anyway


def is_url(where: str) -> bool:
    """Whether `Client.connect` reads `where` as a WebSocket URL (`ws://`, `wss://`) rather than a socket path."""
    return urlsplit(where).scheme in URL_SCHEMES and "://" in where


def websocket_opener(
    url: str, token: str | None, ca_file: str | Path | None
) -> Callable[[], Awaitable[anyio.abc.ByteStream]]:
    """Each connection: TCP (TLS for `wss://`), the upgrade with the bearer token, then lines over frames; a refused
    upgrade raises `HandshakeError`."""
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
    """The WebSocket upgrade: the connection's byte stream once the server switched protocols."""
    await transport.send(handshake.request)
    while True:
        try:
            data: bytes | None = await transport.receive(READ_BYTES)
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            data = None
        lines = handshake.feed(data)
        if lines is not None:
            return WebSocketStream(transport, lines)


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
