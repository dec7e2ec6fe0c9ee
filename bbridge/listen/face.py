"""`bbridge serve --listen HOST:PORT`: one HTTP/1.1 listener, a daemon face beside the Unix socket.

Routes: `GET /rpc` upgraded to WebSocket is the whole client API (a daemon `Client` over `WebSocketStream`);
`/healthz`, `/readyz` and `/metrics` (bearer token) are for operators; `/` and `/assets/<name>` are the page. Every
connection carries one request. What bounds a connection: the head's size and header count (`http`), a deadline
for the head and the upgrade (`HEAD_S`, slowloris), the number of connections at once (`max_connections`: one
over it is answered 503 and closed), a message by the client's line limit, a dead peer by the keepalive, a peer
that stops reading by the client's outbox bound, and a wrong token by closing the connection.
"""

from __future__ import annotations

import contextlib
import itertools
import ssl
import sys
from dataclasses import dataclass, field
from pathlib import Path

import structlog
import trio

from bbridge.daemon.runtime import Daemon
from bbridge.daemon.server import ClientConnection, Face
from bbridge.listen import routes
from bbridge.listen.admission import Address, Admission
from bbridge.listen.http import READ_BYTES, BadRequest, Exchange, Head
from bbridge.listen.wsstream import WebSocketStream
from bbridge.wire.websocket import HandshakeError, MessageLines

log = structlog.get_logger("bbridge.listen")

HEAD_S = 10.0
LINGER_S = 1.0  # a refused peer's unread bytes drained before the close, at most this long
LINGER_BYTES = 1 << 20
MAX_CONNECTIONS = 256
MAX_MESSAGE_BYTES = 16 << 20  # a WebSocket message, as a line; over it, answered as an oversized socket line
PING_S = 20.0
PONG_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class ListenSettings:
    """What `bbridge serve` was told about one `--listen` address."""

    address: Address
    tls: ssl.SSLContext | None = None
    allow_hosts: frozenset[str] = field(default_factory=frozenset)
    allow_origins: frozenset[str] = field(default_factory=frozenset)
    head_s: float = HEAD_S
    max_connections: int = MAX_CONNECTIONS
    max_message_bytes: int = MAX_MESSAGE_BYTES
    ping_s: float = PING_S
    pong_timeout_s: float = PONG_TIMEOUT_S
    print_url: bool = False  # the page's URL with the token on stderr (a terminal, or --print-url)
    token_file: Path | None = None  # named in the log line that leaves the token out


@dataclass
class Bound:
    """Where a listener face is accepting, known once it started (port 0 picks one)."""

    urls: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)


def listen_face(settings: ListenSettings, bound: Bound | None = None) -> Face:
    """A daemon face serving `settings.address`; `bound` learns the address it took."""

    async def face(daemon: Daemon, queue_bytes: int, task_status: trio.TaskStatus[None]) -> None:
        address = settings.address
        listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(
            await trio.open_tcp_listeners(address.port, host=address.host)
        )
        scheme = "https" if settings.tls else "http"
        ports = sorted({listener.socket.getsockname()[1] for listener in listeners})  # type: ignore[attr-defined]
        if settings.tls is not None:
            listeners = [trio.SSLListener(listener, settings.tls, https_compatible=True) for listener in listeners]
        admission = Admission(
            Address(address.host, ports[0]), scheme, daemon.token, settings.allow_hosts, settings.allow_origins
        )
        listener_face = _Listener(daemon, settings, admission, queue_bytes)
        host = f"[{address.host}]" if ":" in address.host else address.host
        if bound is not None:
            bound.ports = ports
            bound.urls = [f"{scheme}://{host}:{port}" for port in ports]
        try:
            log.info("listening", url=f"{scheme}://{host}:{ports[0]}", websocket="/rpc")
            _announce_page(settings, f"{scheme}://{host}:{ports[0]}/", daemon.token)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.serve_listeners, listener_face.handle, listeners)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await listener.aclose()

    return face


class _Listener:
    def __init__(self, daemon: Daemon, settings: ListenSettings, admission: Admission, queue_bytes: int) -> None:
        self._daemon = daemon
        self._settings = settings
        self._admission = admission
        self._queue_bytes = queue_bytes
        self._open = 0
        self._names = itertools.count(1)

    async def handle(self, stream: trio.abc.Stream) -> None:
        self._open += 1
        try:
            if self._open > self._settings.max_connections:
                await _send_closing(stream, Exchange().answer(503, "too many connections\n"))
                return
            await self._serve(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the peer went away (a TLS handshake that failed, a reset): nothing to answer
        finally:
            self._open -= 1
            await trio.aclose_forcefully(stream)

    async def _serve(self, stream: trio.abc.Stream) -> None:
        exchange = Exchange()
        with trio.move_on_after(self._settings.head_s) as waited:
            try:
                head = await exchange.read_head(stream)
            except EOFError:
                return
            except BadRequest as refused:
                await _send_closing(stream, exchange.answer(refused.status, refused.reason + "\n"))
                return
        if waited.cancelled_caught:
            log.info("closing a connection that sent no whole request in time", seconds=self._settings.head_s)
            return
        if (reason := self._admission.host_refusal(head.header("host"))) is not None:
            log.warning("request refused", path=head.path, reason=reason)
            await _send_closing(stream, exchange.answer(403, reason + "\n"))
            return
        if head.path == "/rpc":
            await self._upgrade(stream, exchange, head)
            return
        status, body, content_type, headers = routes.answer(self._daemon, self._admission, head)
        await _send_closing(stream, exchange.answer(status, body, content_type, **headers, **_challenge(status)))

    async def _upgrade(self, stream: trio.abc.Stream, exchange: Exchange, head: Head) -> None:
        refusal = _upgrade_refusal(self._admission, head)
        if refusal is not None:
            status, reason = refusal
            log.warning("WebSocket upgrade refused", status=status, reason=reason)
            await _send_closing(stream, exchange.answer(status, reason + "\n", **_challenge(status)))
            return
        authorized = self._admission.bearer(head.header("authorization")) is True
        try:
            lines, accepted = MessageLines.server(head.headers, head.target)
        except (HandshakeError, ValueError, RuntimeError) as exc:  # wsproto refuses a malformed upgrade
            await _send_closing(stream, exchange.answer(400, f"not a WebSocket upgrade: {exc}\n"))
            return
        name = f"ws-{next(self._names)}"
        with trio.move_on_after(self._settings.head_s):
            await stream.send_all(accepted)
        ws = WebSocketStream(stream, lines, head.rest, name)
        client = ClientConnection(
            self._daemon,
            ws,
            ws,
            name,
            self._queue_bytes,
            transport="ws",
            authorized=authorized,
            max_line=self._settings.max_message_bytes,
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ws.keepalive, self._settings.ping_s, self._settings.pong_timeout_s)
            await client.run()
            nursery.cancel_scope.cancel()


def _announce_page(settings: ListenSettings, url: str, token: str | None) -> None:
    """Say where the page is. With the token in the URL's fragment (which a browser never sends, so it reaches no
    server log) only as one plain line on stderr, where a person reads it: a terminal, or `--print-url`; a log
    collector gets the URL without it, and where the token is kept."""
    if token is None:
        log.info("the page", url=url)
    elif settings.print_url:
        print(f"{url}#token={token}", file=sys.stderr, flush=True)
    else:
        where = str(settings.token_file) if settings.token_file else "the token file"
        log.info(
            "the page (add #token=<the token> to the URL, or run serve with --print-url)", url=url, token_file=where
        )


def _upgrade_refusal(admission: Admission, head: Head) -> tuple[int, str] | None:
    """Why `/rpc` is not upgraded: not a GET upgrade (426), a foreign `Origin` (403), a wrong bearer token (401)."""
    if head.method != "GET" or not head.upgrade:
        return 426, "GET /rpc is the client API over WebSocket: send an Upgrade: websocket request"
    if (reason := admission.origin_refusal(head.header("origin"), head.header("host"))) is not None:
        return 403, reason
    if admission.bearer(head.header("authorization")) is False:
        return 401, "the bearer token is not the daemon's (see --token-file)"
    return None


def _challenge(status: int) -> dict[str, str]:
    return {"www_authenticate": 'Bearer realm="bbridge"'} if status == 401 else {}


async def _send_closing(stream: trio.abc.Stream, data: bytes) -> None:
    """Send a whole answer, then close gently: our side's end first, then a bounded drain of what the peer still
    sends, so its unread request does not turn the close into a reset that loses the answer."""
    with trio.move_on_after(HEAD_S), contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(data)
        if isinstance(stream, trio.abc.HalfCloseableStream):
            await stream.send_eof()
        with trio.move_on_after(LINGER_S):
            drained = 0
            while drained < LINGER_BYTES and (chunk := await stream.receive_some(READ_BYTES)):
                drained += len(chunk)
