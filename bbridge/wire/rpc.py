"""One newline-delimited JSON-RPC 2.0 connection over trio streams, used in every direction (protocol.md §1,
daemon.md §1).

The same class serves the daemon's side of a bridge (child stdin/stdout), the daemon's side of a client (socket or
stdio) and a bridge's own stdin/stdout (`bbridge.kit`). It is the trio shell over sans-IO parts, the h11 way:
`framing.LineReader` splits the stream into lines, `peer.Inbound` classifies a read's lines (and decodes typed
notifications in the same pass, `delta_decoder`), `peer.Calls` correlates our requests with their answers; this module
reads, writes, waits and runs the handlers.

* Each read's events are handled in wire order; a batch of notifications is one `on_notifications` call (a
  read of notifications only, the streaming hot path, is exactly one call).
* Request handlers run concurrently in the connection's nursery, but each one runs up to its first checkpoint
  before the next request is dispatched, so state a handler sets before its first `await` is seen by later
  requests.
* Junk goes to `on_junk` (or a debug log). With `answer_junk` (the daemon's client side, daemon.md §1), a junk
  line whose id can be read is answered with that id, with the error `peer.Inbound` chose.

The JSON-RPC vocabulary a connection's user needs (the error codes and classes its handlers raise and its
requests fail with, the messages its handlers receive and the request encoders `encode_request=` takes) is
re-exported here (`__all__`): every caller says `rpc.X`. Line framing is `framing`'s (`framing.LineReader`).
"""

from __future__ import annotations

import enum
import math
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec
import structlog
import trio

from bbridge.wire.delta_decoder import TypedDecoder
from bbridge.wire.framing import MAX_LINE_BYTES, LineReader, Overflow
from bbridge.wire.jsonrpc import (
    BRIDGE_ERROR,
    FORK_CHECKPOINT_UNSUPPORTED,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NO_ACTIVE_TURN,
    PARSE_ERROR,
    SESSION_NOT_RESTORABLE,
    ConnectionClosed,
    Id,
    Notification,
    Request,
    RequestEncoder,
    RequestTimeout,
    RpcError,
    encode_bridge_request,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
    recover_id,
)
from bbridge.wire.peer import Calls, Inbound, Junk, Mended, Response

__all__ = [
    "BRIDGE_ERROR",
    "DEFAULT",
    "FORK_CHECKPOINT_UNSUPPORTED",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "NO_ACTIVE_TURN",
    "PARSE_ERROR",
    "SESSION_NOT_RESTORABLE",
    "Connection",
    "ConnectionClosed",
    "JunkHandler",
    "Notification",
    "NotificationHandler",
    "Request",
    "RequestHandler",
    "RequestTimeout",
    "RpcError",
    "encode_bridge_request",
    "encode_notification",
    "encode_request",
]

log = structlog.get_logger("bbridge.wire.rpc")


class _Default(enum.Enum):
    TOKEN = enum.auto()


DEFAULT = _Default.TOKEN  # `timeout=` placeholder: the connection's default timeout

RequestHandler = Callable[[Request], Awaitable[Any]]
NotificationHandler = Callable[[list[Notification]], Awaitable[None]]
JunkHandler = Callable[[bytes, str], None]


@runtime_checkable
class WriteNowait(Protocol):
    """A send stream that writes at once without a descriptor of its own bytes, for `Connection.write_now`: a
    WebSocket, whose lines become frames first. `write_nowait` writes what it can now and keeps the rest, sent
    first by its next `send_all`: True when it took the data, False (writing nothing) when it cannot write now;
    `backlog` is True while a rest waits; a broken peer raises `trio.BrokenResourceError`."""

    @property
    def backlog(self) -> bool: ...

    def write_nowait(self, data: bytes) -> bool: ...


def _nothing() -> None:
    return None


class Connection:
    """A JSON-RPC peer over a byte stream pair: one writer, one reader loop, concurrent request handlers."""

    def __init__(
        self,
        send: trio.abc.SendStream | None,
        receive: trio.abc.ReceiveStream,
        *,
        name: str,
        on_request: RequestHandler | None = None,
        on_notifications: NotificationHandler | None = None,
        on_junk: JunkHandler | None = None,
        answer_junk: bool = False,
        default_timeout: float | None = 30.0,
        max_line: int = MAX_LINE_BYTES,
        typed: TypedDecoder | None = None,
        encode_request: RequestEncoder = encode_request,
        respond: Callable[[bytes], None] | None = None,
        fileno: Callable[[], int] | None = None,
        wake_writer: Callable[[], object] | None = None,
    ) -> None:
        """`typed` decodes its notification methods in the framing pass: such a line is parsed once instead of
        twice (a line that does not decode so, or that its screen sends on, takes the generic path unchanged).
        `encode_request` writes our requests: the runtime's member order by default, `encode_bridge_request` for
        a bridge. `respond` takes each answer to a request (one encoded line, no terminator) for the owner to write
        in order with its own queued lines; without it an answer is written at once. `fileno` gives the send
        stream's non-blocking descriptor (-1 once closed), for `write_now`; a `WriteNowait` send stream serves
        `write_now` itself. `wake_writer` is called when a `write_now` leaves its owner's writer work: a rest to
        send (`send_lines`), or a peer that stopped reading."""
        self.name = name
        self._send = send
        self._receive = receive
        self._on_request = on_request
        self._on_notifications = on_notifications
        self._on_junk = on_junk
        self._answer_junk = answer_junk
        self._default_timeout = default_timeout
        self._max_line = max_line
        self._log = log.bind(connection=name)
        self._write_lock = trio.StrictFIFOLock()
        self._write_closed = send is None
        self._torn = False  # a cancelled write may have left a partial line on the wire
        self._closed = False
        self._aclosed = False
        self._calls = Calls(name)
        self._inbound = Inbound(typed, max_line)
        self._typed_read = self._inbound.typed_read
        self._nursery: trio.Nursery | None = None
        self._encode_request = encode_request
        self._respond = respond
        self._fileno = fileno
        self._unsent = b""  # what the stream did not take of a `write_now`: the next write sends it first
        self._nowait = send if fileno is None and isinstance(send, WriteNowait) else None
        self._wake_writer = wake_writer if wake_writer is not None else _nothing

    @property
    def closed(self) -> bool:
        """True once the peer closed, `aclose` ran, or writing failed: no round trip is possible any more."""
        return self._closed or self._write_closed

    @property
    def write_closed(self) -> bool:
        """True once writing failed or `aclose` ran: nothing more reaches the peer (a peer that only closed its
        writing side still reads)."""
        return self._write_closed or self._aclosed

    # -- outbound ------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float | _Default | None = DEFAULT,
        id: Id | None = None,
    ) -> Any:
        """Send a request and return its result decoded to builtins."""
        return msgspec.json.decode(await self.request_raw(method, params, timeout=timeout, id=id))

    async def request_raw(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float | _Default | None = DEFAULT,
        id: Id | None = None,
        on_result: Callable[[msgspec.Raw], None] | None = None,
    ) -> msgspec.Raw:
        """Send a request and return its result undecoded (the caller decodes into its own type).

        `on_result` runs in the reader, as the success response is read: after every message before it and
        before any after it (state a result changes must be in place for the peer's next notifications).
        Raises `RpcError` as the peer sent it, `RequestTimeout`, or `ConnectionClosed`.
        """
        if self.closed:
            raise ConnectionClosed(f"JSON-RPC connection {self.name!r} is closed")
        done = trio.Event()
        id, call = self._calls.open(id, done.set, on_result)
        limit = self._default_timeout if timeout is DEFAULT else timeout
        try:
            await self._write(self._encode_request(method, params, id))
            with trio.move_on_after(math.inf if limit is None else limit):
                await done.wait()
        finally:
            self._calls.close(id, call)
        if not call.done:
            raise RequestTimeout(method)
        if call.error is not None:
            raise call.error.with_traceback(None)  # one instance may fail many requests
        return call.result

    async def notify(self, method: str, params: Any = None) -> None:
        await self._write(encode_notification(method, params))

    async def send_lines(self, lines: list[bytes]) -> None:
        """Write pre-encoded messages (no terminators) in one `send_all`, so they stay contiguous, after what a
        `write_now` left."""
        if lines or self.unsent:
            await self._write(*lines)

    @property
    def unsent(self) -> bool:
        """True while part of a `write_now` waits for the next `send_lines`."""
        return bool(self._unsent) or (self._nowait is not None and self._nowait.backlog)

    def write_now(self, lines: list[bytes]) -> bool:
        """Writes pre-encoded messages at once, with no task switch or scheduler pass, when nothing else is being
        written: True when they were taken (written, or their unwritten tail kept for the next `send_lines`, see
        `unsent`; to a peer that stopped reading, dropped as `_write` drops them: either calls `wake_writer`);
        False, writing nothing, when a write is under way, the stream is full or has no descriptor.

        Without it a client's writer task woke, took the lock, and yielded to the scheduler twice around each
        send, for every client and every read."""
        if self._write_closed or self._aclosed or self._unsent or self._torn:
            return False
        nowait = self._nowait
        if nowait is not None:
            if self._write_lock.locked():
                return False
            try:
                taken = nowait.write_nowait(b"\n".join([*lines, b""]))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._write_closed = True
                self._log.debug("peer stopped reading", error=repr(exc))
                self._wake_writer()
                return True
            if taken and nowait.backlog:
                self._wake_writer()
            return taken
        if self._fileno is None:
            return False
        fd = -1 if self._write_lock.locked() else self._fileno()
        if fd < 0:
            return False
        data = b"\n".join([*lines, b""])
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            return False
        except OSError as exc:
            self._write_closed = True
            self._log.debug("peer stopped reading", error=repr(exc))
            self._wake_writer()
            return True
        if sent < len(data):
            self._unsent = data[sent:]
            self._wake_writer()
        return True

    def fail_pending(self, error: RpcError) -> None:
        """Fail every outstanding request with `error`, e.g. naming the exit status once it is known."""
        self._calls.fail_all(error)

    async def _write(self, *messages: bytes) -> None:
        """Single writer: whole lines in call order; a broken peer is swallowed and marks us closed for writing."""
        if self._write_closed or self._send is None:
            return
        lock = self._write_lock
        try:
            lock.acquire_nowait()  # uncontended, the send comes without a scheduler pass first (`send_all` checkpoints)
        except trio.WouldBlock:
            await lock.acquire()
        try:
            if self._write_closed:
                return
            data = b"\n".join([b"", *messages, b""] if self._torn else [*messages, b""])  # one copy, terminated
            if self._unsent:
                data, self._unsent = self._unsent + data, b""
            self._torn = False
            try:
                await self._send.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._write_closed = True
                self._log.debug("peer stopped reading", error=repr(exc))
            except trio.Cancelled:
                self._torn = True
                raise
        finally:
            lock.release()

    async def aclose(self) -> None:
        """Close both streams, fail outstanding requests and stop the reader and handlers."""
        if self._aclosed:
            return
        self._aclosed = self._closed = True
        self.fail_pending(ConnectionClosed(f"JSON-RPC connection {self.name!r} was closed"))
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        if self._send is not None:
            await trio.aclose_forcefully(self._send)
        await trio.aclose_forcefully(self._receive)

    # -- inbound -------------------------------------------------------------

    async def run(self, *, drain: bool = False) -> None:
        """Read until EOF, then fail outstanding requests with `ConnectionClosed` and return.

        Request handlers still running at EOF are cancelled, or awaited with `drain=True` (a bridge whose runtime
        closed its stdin still finishes what it was asked; its writes are swallowed if nobody reads).
        """
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._read_loop()
                self._closed = True
                self.fail_pending(ConnectionClosed(f"JSON-RPC peer {self.name!r} closed the connection"))
                if not drain:
                    nursery.cancel_scope.cancel()
        finally:
            self._closed = True
            self._nursery = None

    async def _read_loop(self) -> None:
        reader = LineReader(self._max_line)
        receive, whole = self._receive.receive_some, reader.whole
        typed_whole, typed_read = self._inbound.typed_whole, self._typed_read
        while True:
            try:
                data = await receive()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                break
            if not data:
                break
            # the streaming hot path: a read of whole lines, decoded whole, straight to the handler
            lines: Sequence[bytes | Overflow] | None = None
            if whole(data):
                batch = typed_whole(data)
                if batch is None:
                    lines = reader.feed(data)
            else:
                lines = reader.feed(data)
                batch = typed_read(lines)
            if batch is not None:
                await self._flush(batch)
            elif lines is not None:
                await self._dispatch(lines)
            # The read's messages go now, while they are in the cache: kept until the next read rebound these names,
            # they were freed after every other task's work, the decrements of their fields' counts each a cache
            # miss.
            del data, lines, batch
        await self._dispatch(reader.close())

    async def _dispatch(self, lines: Sequence[bytes | Overflow]) -> None:
        """A read's lines classified one by one (`peer.Inbound.receive`), each event handled in order."""
        for event in self._inbound.receive(lines):
            if type(event) is list:
                await self._flush(event)
            elif type(event) is Request:
                assert self._nursery is not None
                await self._nursery.start(self._serve, event)
            elif type(event) is Response:
                self._settle(event)
            elif type(event) is Junk:
                await self._refuse(event)
            elif type(event) is Mended:
                self._log.warning("replaced lone UTF-16 surrogates with U+FFFD", bytes=event.size)

    async def _flush(self, batch: list[Notification]) -> None:
        if self._on_notifications is not None:
            try:
                await self._on_notifications(batch)
            except Exception:
                self._log.exception("notification handler failed", methods=sorted({n.method for n in batch}))

    def _settle(self, response: Response) -> None:
        call = self._calls.answer(response)
        if call is not None and call.error is None and call.on_result is not None:
            try:
                call.on_result(call.result)
            except Exception:
                self._log.exception("a response's in-order handler failed", id=response.id)

    async def _refuse(self, junk: Junk) -> None:
        """Junk, answered by the id it carries (or that can be read from it) when this side answers junk."""
        self._junk(junk.line, junk.reason)
        if self._answer_junk and junk.code is not None:
            id = recover_id(junk.line) if junk.id is None else junk.id
            if id is not None:
                await self._write(encode_error(id, RpcError(junk.code, junk.message)))

    def _junk(self, line: bytes, reason: str) -> None:
        if self._on_junk is not None:
            self._on_junk(line, reason)
        else:
            self._log.debug("ignored a non-protocol line", reason=reason, line=line[:200].decode("utf-8", "replace"))

    async def _serve(self, request: Request, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            if self._on_request is None:
                raise RpcError(METHOD_NOT_FOUND, f"Method not found: {request.method}")
            result = await self._on_request(request)
            answer = encode_result(request.id, result)
        except RpcError as exc:
            answer = encode_error(request.id, exc)
        except Exception as exc:
            self._log.exception("request handler failed", method=request.method)
            answer = encode_error(request.id, RpcError(BRIDGE_ERROR, str(exc) or type(exc).__name__))
        if self._respond is not None:
            self._respond(answer)
        else:
            await self._write(answer)
