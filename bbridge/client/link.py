"""One connection to the daemon under anyio (trio or asyncio): JSON-RPC over a byte stream on the wire's sans-IO
pieces, the ones `bbridge.wire.rpc.Connection` drives under trio on the daemon's side of the same connection.

* `framing.LineReader` splits the stream into lines, bounded as the daemon bounds its clients' (`MAX_LINE_BYTES`).
* `peer.Inbound` classifies each read's lines in wire order: notifications (handed on typed, as `Notice`s), the
  daemon's requests (to the client's handler), answers, junk.
* `peer.Calls` mints our requests' ids and settles each with its answer: an error answer is the daemon's
  `RpcError`, an answer to an id nobody waits for is dropped, and what still waits when the connection ends fails
  with `ConnectionClosed`.

An unreadable line (over the bound, not JSON, nested too deep) is refused as the daemon's connection refuses one:
logged and dropped, and nothing else is lost; the connection goes on. An unreadable answer fails the request it
answers (`UnreadableAnswer`, rather than a wait for ever), and an unreadable request whose id can be read is
answered with the error `peer.Inbound` chose for it (the daemon's rule for its clients' lines).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import msgspec
from anyio.streams.memory import MemoryObjectSendStream

from bbridge.wire import client_api as api
from bbridge.wire.framing import MAX_LINE_BYTES, LineReader, Overflow
from bbridge.wire.jsonrpc import (
    INVALID_REQUEST,
    ConnectionClosed,
    Notification,
    Request,
    RpcError,
    encode_bridge_request,
    encode_error,
    recover_answer_id,
    recover_id,
)
from bbridge.wire.peer import Calls, Inbound, Junk, Mended, Response

# The standard library's logger, not structlog: an embedding program configures (or silences) it as any library's,
# and unconfigured its warnings go to stderr (`logging.lastResort`), never to a stdout that may carry a protocol.
log = logging.getLogger("bbridge.client")

CLOSED = "the daemon closed the connection"


@dataclass(frozen=True, slots=True)
class Notice:
    """A notification from the daemon: `params` typed (`client_api.NOTIFICATION_PARAMS`: a `thread/events` batch,
    `interaction/opened`, `/resolved`, ...; None for a method this client does not know, or params that do not
    decode), `raw` the params as sent. Both are read-only: they may share values."""

    method: str
    params: api.NotificationParams | None
    raw: dict[str, Any]

    @classmethod
    def of(cls, method: str, raw: dict[str, Any]) -> Notice:
        """A notification from its method and params as builtins."""
        kind = api.NOTIFICATION_PARAMS.get(method)
        params: Any = None
        if kind is not None:
            with contextlib.suppress(msgspec.ValidationError):  # a newer daemon's params, say: `raw` has them
                params = msgspec.convert(raw, kind)
        return cls(method, params, raw)


def _notice(note: Notification) -> Notice:
    """A classified notification as a `Notice`; params that are no object (the daemon sends none) read as `{}`."""
    raw = msgspec.json.decode(note.params) if note.params else {}
    return Notice.of(note.method, raw if isinstance(raw, dict) else {})


class UnreadableAnswer(RpcError):
    """The answer to one of our requests came unreadable (over the line bound, not JSON): the request may have
    taken effect, but what it returned is lost."""


RequestTaker = Callable[["Link", Request], None]  # starts the answer to a daemon's request; must not block


class Link:
    """One connection: its stream, our requests awaiting answers (`peer.Calls`), and its reader (`run`)."""

    def __init__(self, stream: anyio.abc.ByteStream, *, max_line: int = MAX_LINE_BYTES) -> None:
        self.stream = stream
        self.calls = Calls("daemon")
        self.closed = False  # set once the reader ended, before its first await: a later call fails at once
        self._max_line = max_line
        self._inbound = Inbound(max_line=max_line)
        self._write_lock = anyio.Lock()

    async def call(self, method: str, params: Any) -> msgspec.Raw:
        """Our request's result, undecoded; raises the `RpcError` the daemon answered with, `UnreadableAnswer`, or
        `ConnectionClosed` (the connection ended first, or had already)."""
        if self.closed:
            raise ConnectionClosed(CLOSED)
        done = anyio.Event()
        ident, call = self.calls.open(None, done.set)
        try:
            # the id first: a line the daemon cannot read is still answered by the id it reads from its head
            await self.send(encode_bridge_request(method, params, ident))
            await done.wait()
        finally:
            self.calls.close(ident, call)
        if call.error is not None:
            raise call.error.with_traceback(None)  # one instance may fail many calls (`Calls.fail_all`)
        return call.result

    async def send(self, line: bytes) -> None:
        """One message (no terminator); `ConnectionClosed` when the connection has ended."""
        async with self._write_lock:
            if self.closed:
                raise ConnectionClosed(CLOSED)
            try:
                await self.stream.send(line + b"\n")
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                raise ConnectionClosed(CLOSED) from None

    async def run(self, notes: MemoryObjectSendStream[Notice], on_request: RequestTaker) -> None:
        """Read until the daemon closes: notifications to `notes` in order, requests to `on_request`, answers to
        their calls; then fail what still waits, close `notes` and the stream."""
        reader = LineReader(self._max_line)
        try:
            while True:
                try:
                    data = await self.stream.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    break
                await self._take(reader.feed(data), notes, on_request)
            await self._take(reader.close(), notes, on_request)
        finally:
            self.closed = True
            self.calls.fail_all(ConnectionClosed(CLOSED))
            notes.close()
            with anyio.CancelScope(shield=True):
                await self.stream.aclose()  # a later call fails at once (ConnectionClosed), not waiting for an answer

    async def _take(
        self, lines: Sequence[bytes | Overflow], notes: MemoryObjectSendStream[Notice], on_request: RequestTaker
    ) -> None:
        """One read's lines, each message handled in wire order (`peer.Inbound.receive`)."""
        for event in self._inbound.receive(lines):
            if type(event) is list:
                for note in event:
                    notes.send_nowait(_notice(note))  # an unbounded stream: never full
            elif type(event) is Request:
                on_request(self, event)
            elif type(event) is Response:
                self.calls.answer(event)  # an id nobody waits for is dropped
            elif type(event) is Junk:
                await self._refuse(event)
            elif type(event) is Mended:
                log.warning("replaced lone UTF-16 surrogates with U+FFFD in %d bytes from the daemon", event.size)

    async def _refuse(self, junk: Junk) -> None:
        """An unreadable line: logged; an answer's fails its call, a request's is answered when its id reads."""
        text = junk.line[:200].decode("utf-8", errors="replace")
        log.warning("unreadable daemon message (%s): %s", junk.reason, text)
        answers = recover_answer_id(junk.line) if junk.id is None else None
        if answers is not None:
            reason = f"the daemon's answer was unreadable: {junk.reason}"
            self.calls.fail(answers, UnreadableAnswer(INVALID_REQUEST if junk.code is None else junk.code, reason))
            return
        asked = recover_id(junk.line) if junk.id is None else junk.id
        if asked is not None and junk.code is not None:
            with contextlib.suppress(ConnectionClosed):  # the daemon went away: it keeps the request pending
                await self.send(encode_error(asked, RpcError(junk.code, junk.message)))
