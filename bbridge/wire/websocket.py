"""The client API over WebSocket, sans-IO: one JSON-RPC message per text frame, as newline-delimited lines.

`MessageLines` wraps one wsproto connection (the daemon's listener is its server side, `bbridge.client` its client
side) so the JSON-RPC layer above it reads and writes the same lines as on a Unix socket:

* a text message becomes one line: its CR and LF bytes become spaces (JSON allows them only as whitespace between
  tokens, so a pretty-printed message stays one message, and two messages in one frame stay one line that the
  JSON-RPC layer refuses as junk, as a socket refuses such a line); a message arrives in pieces as its frames do,
  so a message over the line limit is cut by the same `LineReader` bound as on a socket, never held whole here;
* a binary message is not read, and is answered as a socket answers a line it cannot read: an Invalid Request
  error naming the rule when its id can be recovered (`jsonrpc.recover_id`), nothing otherwise (JSON-RPC never
  answers with id null); the connection stays;
* each line written becomes one text frame;
* pings are answered, pongs noted (the keepalive's proof of life), a close is answered and ends the lines.

No compression extension is offered or accepted, so a frame's size is its size on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.frame_protocol import FrameProtocol
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from bbridge.wire.framing import HEAD_BYTES
from bbridge.wire.jsonrpc import INVALID_REQUEST, RpcError, encode_error, recover_id

__all__ = [
    "BINARY_REFUSED",
    "ClientHandshake",
    "HandshakeError",
    "MessageLines",
    "Received",
]

BINARY_REFUSED = "binary frames are not read: send each JSON-RPC message as one text frame"
_NEWLINES = bytes.maketrans(b"\r\n", b"  ")
# Frames every server connection's whole text messages (`MessageLines.frames`); no state outlives a message.
_SERVER_FRAMES = FrameProtocol(client=False, extensions=[])


class HandshakeError(Exception):
    """The server refused the upgrade, or answered something that is not a WebSocket handshake."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Received:
    """What a read's bytes meant."""

    lines: bytes = b""  # complete lines (each ending in LF) and the start of an unfinished one, for a LineReader
    reply: bytes = b""  # what must go back at once: pongs, a close's answer, refusals of binary messages
    pong: bool = False  # the peer answered a ping (or sent an unsolicited pong): it is alive
    closed: bool = False  # the peer closed (or the connection broke): no more lines
    close_reason: str = ""
    refused: list[str] = field(default_factory=list)  # why a message was not read (binary), for the log


class MessageLines:
    """One open WebSocket connection, frames ↔ lines."""

    # The server side's last `frames` (its lines, its frames), shared by every server connection: a server's frames
    # are unmasked and uncompressed, so the same lines make the same bytes on every connection, and a broadcast's
    # lines, written to each client in turn, are framed once (wsproto's send path costs microseconds a line).
    _last_framed: tuple[bytes, bytes] = (b"", b"")

    def __init__(self, ws: WSConnection, *, server: bool = False) -> None:
        self._ws = ws
        self._server = server
        self._binary_head = bytearray()  # a binary message's first bytes, for its id

    @classmethod
    def server(
        cls, headers: list[tuple[bytes, bytes]], target: bytes, subprotocol: str | None = None
    ) -> tuple[MessageLines, bytes]:
        """Accept an upgrade request h11 already read: the connection and the 101 answer's bytes."""
        ws = WSConnection(ConnectionType.SERVER)
        ws.initiate_upgrade_connection(headers, target)
        for event in ws.events():
            if not isinstance(event, Request):  # pragma: no cover - wsproto yields the request it was given
                raise HandshakeError(f"unexpected handshake event {type(event).__name__}")
        return cls(ws, server=True), ws.send(AcceptConnection(subprotocol=subprotocol))

    @property
    def open(self) -> bool:
        return self._ws.state is ConnectionState.OPEN

    def receive(self, data: bytes | None) -> Received:
        """Feed what the socket read (`None` at its end)."""
        out = Received()
        lines = bytearray()
        reply = bytearray()
        try:
            self._ws.receive_data(data)
        except LocalProtocolError:  # data after the close: nothing more is read
            out.closed = True
            return out
        try:
            for event in self._ws.events():
                self._apply(event, out, lines, reply)
        except RemoteProtocolError as exc:  # pragma: no cover - wsproto turns framing errors into a close event
            out.closed, out.close_reason = True, str(exc)
        out.lines, out.reply = bytes(lines), bytes(reply)
        return out

    def _apply(self, event: Event, out: Received, lines: bytearray, reply: bytearray) -> None:
        if isinstance(event, TextMessage):
            lines += event.data.encode("utf-8").translate(_NEWLINES)
            if event.message_finished:
                lines += b"\n"
        elif isinstance(event, BytesMessage):
            head = self._binary_head
            head += event.data[: max(0, HEAD_BYTES - len(head))]
            if event.message_finished:
                out.refused.append(BINARY_REFUSED)
                if (request_id := recover_id(bytes(head))) is not None:
                    reply += self.frame(encode_error(request_id, RpcError(INVALID_REQUEST, BINARY_REFUSED)))
                head.clear()
        elif isinstance(event, Ping):
            reply += self._send(event.response())
        elif isinstance(event, Pong):
            out.pong = True
        elif isinstance(event, CloseConnection):
            out.closed, out.close_reason = True, event.reason or f"close code {event.code}"
            if self._ws.state is ConnectionState.REMOTE_CLOSING:
                reply += self._ws.send(event.response())

    def frame(self, line: bytes) -> bytes:
        """One line as one text frame (nothing once the connection is closing)."""
        return self._send(TextMessage(data=line.decode("utf-8", errors="replace")))

    def frames(self, data: bytes) -> bytes:
        """Newline-separated lines (as `rpc.Connection` writes them) as one text frame each."""
        if not self.open:
            return b""
        out = bytearray()
        if not self._server:  # a client's frames are masked, each afresh: its connection frames them
            send = self._ws.send
            for line in data.split(b"\n"):
                if line:
                    out += send(TextMessage(data=line.decode("utf-8", errors="replace")))
            return bytes(out)
        lines, framed = MessageLines._last_framed
        if data == lines:
            return framed
        # A server's text frame is the same bytes on every connection (unmasked, no extension): wsproto's frame
        # protocol frames it directly, without an event object and the connection's dispatch
        send_data = _SERVER_FRAMES.send_data
        for text in data.decode("utf-8", errors="replace").split("\n"):
            if text:
                out += send_data(text, True)
        framed = bytes(out)
        MessageLines._last_framed = (data, framed)
        return framed

    def ping(self, payload: bytes = b"") -> bytes:
        return self._send(Ping(payload=payload))

    def close(self, code: int = 1000, reason: str = "") -> bytes:
        """The close frame to send (nothing when one was sent already or the connection is gone)."""
        if self._ws.state not in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            return b""
        return self._ws.send(CloseConnection(code=code, reason=reason))

    def _send(self, event: Event) -> bytes:
        if not self.open:
            return b""
        return self._ws.send(event)


class ClientHandshake:
    """The client side's upgrade: the request's bytes, then the server's answer fed until it accepts or refuses."""

    def __init__(self, host: str, target: str, headers: list[tuple[str, str]]) -> None:
        self._ws = WSConnection(ConnectionType.CLIENT)
        extra = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
        self.request = self._ws.send(Request(host=host, target=target, extra_headers=extra))
        self._refused: RejectConnection | None = None
        self._body = bytearray()

    def feed(self, data: bytes | None) -> MessageLines | None:
        """The open connection once the server accepted, None while more is needed; raises `HandshakeError` with
        the server's status and body when it refused, or when the connection ended first."""
        try:
            self._ws.receive_data(data)
            events = list(self._ws.events())
        except RemoteProtocolError as exc:
            if data is None:
                raise HandshakeError("the connection closed during the WebSocket handshake") from None
            raise HandshakeError(f"the server's answer is not a WebSocket handshake: {exc}") from None
        for event in events:
            if isinstance(event, AcceptConnection):
                return MessageLines(self._ws)
            if isinstance(event, RejectConnection):
                self._refused = event
                if not event.has_body:
                    self._refuse()
            elif isinstance(event, RejectData):
                self._body += event.data
                if event.body_finished:
                    self._refuse()
        if data is None:
            if self._refused is not None:
                self._refuse()
            raise HandshakeError("the connection closed during the WebSocket handshake")
        return None

    def _refuse(self) -> None:
        status = self._refused.status_code if self._refused is not None else None
        text = self._body.decode("utf-8", errors="replace").strip()
        raise HandshakeError(f"the server refused the WebSocket upgrade: {status} {text}".rstrip(), status)
