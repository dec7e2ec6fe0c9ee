"""One HTTP/1.1 request's head read under bounds, and the plain answers the listener gives, over h11.

Every connection carries one request: a plain answer closes it, an upgrade hands it to the WebSocket side with the
bytes read past the head. The bounds: the head's size (`MAX_HEAD_BYTES`, h11 refuses more) and header count
(`MAX_HEADERS`); the caller puts the read under a deadline (slowloris).
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

import h11
import trio

MAX_HEAD_BYTES = 16 * 1024
MAX_HEADERS = 64
READ_BYTES = 65536


class BadRequest(Exception):
    """A request the listener answers with `status` and closes."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class Head:
    """A request's method, path, headers (names lowercased) and what was read past it."""

    method: str
    target: bytes
    headers: list[tuple[bytes, bytes]]
    rest: bytes

    @property
    def path(self) -> str:
        return self.target.split(b"?", 1)[0].decode("ascii", errors="replace")

    def header(self, name: str) -> str | None:
        """One header's value (the last of its name), None when absent."""
        wanted = name.encode("ascii")
        value = None
        for key, raw in self.headers:
            if key == wanted:
                value = raw.decode("latin-1")
        return value

    @property
    def upgrade(self) -> bool:
        return (self.header("upgrade") or "").strip().lower() == "websocket"


class Exchange:
    """One connection's request and its answer, on one h11 connection."""

    def __init__(self) -> None:
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._head_only = False  # a HEAD request: its answer has the headers of a GET's and no body

    async def read_head(self, stream: trio.abc.Stream) -> Head:
        """Read one request's head; raises `BadRequest` for what h11 or the bounds refuse, `EOFError` when the
        peer closed before a whole head."""
        conn = self._conn
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise BadRequest(exc.error_status_hint, f"bad request: {exc}") from None
            if event is h11.NEED_DATA:
                data = await stream.receive_some(READ_BYTES)
                if not data:
                    raise EOFError
                conn.receive_data(bytes(data))
                continue
            if not isinstance(event, h11.Request):  # pragma: no cover - h11 yields a request first
                raise BadRequest(400, "expected an HTTP request")
            if len(event.headers) > MAX_HEADERS:
                raise BadRequest(431, f"more than {MAX_HEADERS} headers")
            rest = conn.trailing_data[0] if conn.next_event() is h11.PAUSED else b""
            self._head_only = event.method == b"HEAD"
            return Head(event.method.decode("ascii"), event.target, list(event.headers), rest)

    def answer(
        self, status: int, body: bytes | str, content_type: str = "text/plain; charset=utf-8", **extra: str
    ) -> bytes:
        """A whole response that closes the connection (h11 lets a server answer before or after a bad request);
        `extra` headers (`x_frame_options` is `x-frame-options`) are added, or replace the defaults."""
        data = body.encode("utf-8") if isinstance(body, str) else body
        headers = {
            "content-type": content_type,
            "content-length": str(len(data)),
            "connection": "close",
            "cache-control": "no-store",
            "x-content-type-options": "nosniff",
        }
        headers.update((name.replace("_", "-"), value) for name, value in extra.items())
        conn = self._conn
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):  # pragma: no cover - one answer per connection
            return b""
        response = h11.Response(status_code=status, headers=list(headers.items()), reason=HTTPStatus(status).phrase)
        out = conn.send(response) or b""
        if not self._head_only:  # h11 refuses a HEAD answer's body (it raised, and the listener went down with it)
            out += conn.send(h11.Data(data=data)) or b""
        return out + (conn.send(h11.EndOfMessage()) or b"")
