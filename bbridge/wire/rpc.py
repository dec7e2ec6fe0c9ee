"""One newline-delimited JSON-RPC 2.0 connection, used in every direction (protocol.md §1, daemon.md §1).

The same class serves the daemon's side of a bridge (child stdin/stdout), the
daemon's side of a client (socket or stdio) and a bridge's own stdin/stdout
(`bbridge.kit`). `LineReader` is the sans-IO bounded framer; `Connection` is
the trio shell around it.

Decisions the spec leaves open, fixed here:

* Ordering. Each read chunk is processed in wire order. Consecutive
  notifications are handed to `on_notifications` as one batch; a response or a
  request ends the batch (the batch is delivered first), so a response is never
  observed before the notifications that preceded it (e.g. the settling deltas
  of an interrupt before the `thread/stop` answer). A chunk of notifications
  only, the streaming hot path, is exactly one call.
* Request handlers run concurrently in the connection's nursery, but each one
  runs up to its first checkpoint before the next request is dispatched, so
  state a handler sets before its first `await` is seen by later requests.
* Junk. Lines that are not JSON, not an object, nested deeper than
  `MAX_JSON_DEPTH`, oversized, or no valid JSON-RPC message go to `on_junk`
  (or a debug log). With `answer_junk` (the daemon's client side, daemon.md
  §1), a junk line whose id can be read is answered with that id: -32700 for
  a line that does not decode (its id recovered leniently from its text, as
  `recover_id` says), -32600 for the rest, an oversized line included (its id
  read from the first `HEAD_BYTES`, which `LineReader` keeps). Nothing is ever
  answered with id null: hygiene (§1.8 rule 3) says a non-JSON line is ignored,
  and a null-id error is itself unclassifiable junk to the peer.
* Blank lines (whitespace only) are skipped silently.
* `Overflow.size` counts the whole dropped line; the reference's counter
  misses the segment before the terminator. Lines longer than the cap are
  dropped whether or not they arrived in one chunk, so framing never depends
  on how the stream was chunked.
"""

from __future__ import annotations

import enum
import functools
import json
import math
import operator
import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

import msgspec
import structlog
import trio
from msgspec import UNSET

from bbridge.core.nesting import MAX_JSON_DEPTH, too_deep

MAX_LINE_BYTES = 64 * 1024 * 1024
HEAD_BYTES = 4096  # what an oversized line keeps, so its id can still be answered

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
BRIDGE_ERROR = -32000
NO_ACTIVE_TURN = -32001
SESSION_NOT_RESTORABLE = -32002
FORK_CHECKPOINT_UNSUPPORTED = -32003

log = structlog.get_logger("bbridge.wire.rpc")

# -- framing (sans-IO) -------------------------------------------------------


class Overflow(NamedTuple):
    """An oversized line was discarded; `size` is its byte count (terminator excluded), `head` its first bytes."""

    size: int
    head: bytes = b""


class LineReader:
    """Bounded line splitter of protocol.md §1.2, over bytes (0x0A never occurs inside a UTF-8 sequence)."""

    def __init__(self, max_bytes: int = MAX_LINE_BYTES) -> None:
        self._max = max_bytes
        self._pending = bytearray()
        self._discarding = False
        self._discarded = 0
        self._head = b""

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | Overflow]:
        """Complete lines in order (one trailing CR removed), an `Overflow` where a line was dropped."""
        data = bytes(data)
        parts = data.split(b"\n")
        tail = parts.pop()
        pending = self._pending
        if (
            not self._discarding
            and len(pending) + len(data) <= self._max
            and b"\r" not in data
            and not pending.endswith(b"\r")
        ):
            # the streaming hot path: no line can be too long and none ends in CR
            if pending and parts:
                parts[0] = bytes(pending) + parts[0]
                pending.clear()
            if tail:
                pending += tail
            return cast("list[bytes | Overflow]", parts)
        out: list[bytes | Overflow] = []
        for segment in parts:
            if self._discarding:
                out.append(Overflow(self._discarded + len(segment), self._head))
                self._discarding, self._discarded, self._head = False, 0, b""
                continue
            if self._pending:
                self._pending += segment
                segment = bytes(self._pending)
                self._pending.clear()
            out.append(
                _strip_cr(segment) if len(segment) <= self._max else Overflow(len(segment), segment[:HEAD_BYTES])
            )
        if self._discarding:
            self._discarded += len(tail)
        elif tail:
            self._pending += tail
            if len(self._pending) > self._max:
                self._discarding, self._discarded = True, len(self._pending)
                self._head = bytes(self._pending[:HEAD_BYTES])
                self._pending = bytearray()
        return out

    def close(self) -> list[bytes]:
        """The unterminated tail at end of stream; an oversized one is dropped silently."""
        tail, self._pending = bytes(self._pending), bytearray()
        discarding, self._discarding, self._discarded, self._head = self._discarding, False, 0, b""
        return [_strip_cr(tail)] if tail and not discarding else []


def _strip_cr(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line


# -- messages ----------------------------------------------------------------


class RpcError(Exception):
    """A JSON-RPC error object: raised by handlers to answer with it, raised by `request` when the peer sent one."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}, {self.message!r})"


class RequestTimeout(RpcError):
    """No response within the request's timeout (protocol.md §1.6 wording)."""

    def __init__(self, method: str) -> None:
        super().__init__(BRIDGE_ERROR, f"JSON-RPC request timed out: {method}")
        self.method = method


class ConnectionClosed(RpcError):
    """The peer went away (or the connection was closed) with the request outstanding."""

    def __init__(self, message: str = "JSON-RPC connection closed") -> None:
        super().__init__(BRIDGE_ERROR, message)


class Request(msgspec.Struct, gc=False):
    id: str | int | float
    method: str
    params: msgspec.Raw | None  # None when the key was absent


class Notification(msgspec.Struct, gc=False):
    method: str
    params: msgspec.Raw | None
    # The params already decoded, for a method the connection decodes while framing (`typed_params`);
    # `params` is None then: the line was parsed once, into this value.
    decoded: Any = None


class _Envelope(msgspec.Struct, gc=False):
    """Any JSON object; only the members that classify a message are looked at (`jsonrpc` is not checked)."""

    id: Any = UNSET
    method: Any = UNSET
    params: msgspec.Raw = msgspec.Raw()
    result: msgspec.Raw = msgspec.Raw()
    error: msgspec.Raw = msgspec.Raw()


_decode_envelope = msgspec.json.Decoder(_Envelope).decode
_encode = msgspec.json.Encoder().encode
_NULL = msgspec.Raw(b"null")


_ID_TYPES = frozenset({str, int, float})


def _valid_id(value: Any) -> bool:
    return type(value) in _ID_TYPES


class TypedDecoder:
    """Decoders for whole messages of the given notification methods, tagged on `method`, params typed: `one` for a
    line, `many` for a read's lines joined as one JSON array (`tags`: each method as it appears in a line).

    `screen`: a line (or read) for which it returns anything but None is not decoded here; it takes the generic path,
    for the handler's own decoder. `float_hook`: msgspec's, for the untyped values in the params, as that decoder
    has it (the same line must decode to the same values on either path)."""

    def __init__(
        self,
        types: Mapping[str, Any],
        *,
        screen: Callable[[bytes], object] | None = None,
        float_hook: Callable[[str], Any] | None = None,
    ) -> None:
        self.members: dict[type, str] = {
            msgspec.defstruct(
                f"_Typed{index}", [("params", kind), ("id", Any, UNSET)], tag_field="method", tag=method, gc=False
            ): method
            for index, (method, kind) in enumerate(types.items())
        }
        union: Any = functools.reduce(operator.or_, self.members)
        self.one: Callable[[bytes], Any] = msgspec.json.Decoder(union, float_hook=float_hook).decode
        self.many: Callable[[bytes], list[Any]] = msgspec.json.Decoder(list[union], float_hook=float_hook).decode
        self.tags = [json.dumps(method).encode() for method in types]
        self.screen = screen


_KEY_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,256}"|-?\d{1,20}(?:\.\d{1,20})?(?:[eE][+-]?\d{1,3})?)')


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def mend_surrogates(line: bytes) -> bytes | None:
    """The line with each lone UTF-16 surrogate escape replaced by U+FFFD, or None when that is not its fault.

    JavaScript's `JSON.stringify` writes a lone surrogate as `\\udXXX` (a reference bridge cutting a string
    between the halves of a pair does); msgspec refuses such a line whole, which would lose everything in it.
    Rare, so it pays for a second parse; the caller has already bounded the line's size and depth.
    """
    if b"\\u" not in line:
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None

    found = 0

    def mend(item: Any) -> Any:
        nonlocal found
        if isinstance(item, str):
            text, count = _LONE_SURROGATE.subn("\ufffd", item)
            found += count
            return text
        if isinstance(item, list):
            return [mend(v) for v in item]
        if isinstance(item, dict):
            return {mend(k): mend(v) for k, v in item.items()}
        return item

    mended = msgspec.json.encode(mend(value))
    return mended if found else None


def recover_id(text: bytes) -> str | int | float | None:
    """The id of a line that cannot be decoded, read leniently from its first `HEAD_BYTES`.

    Taken only from the top level: the object's first member named `"id"`
    before any nested object or array opens (members after params are not
    reached: the answer then goes unsent, as for a line with no id).
    """
    head = text[:HEAD_BYTES].lstrip()
    if not head.startswith(b"{"):
        return None
    nested = min((i for i in (head.find(b"{", 1), head.find(b"[", 1)) if i > 0), default=len(head))
    match = _KEY_ID.search(head, 1, nested)
    if match is None:
        return None
    try:
        value = msgspec.json.decode(match.group(1).decode("utf-8", "replace"))
    except msgspec.DecodeError:
        return None
    return value if _valid_id(value) else None


def encode_request(method: str, params: Any, id: str | int | float) -> bytes:
    """`{"jsonrpc","method","params"?,"id"}`, the runtime's key order; `params` omitted when None."""
    head = b'{"jsonrpc":"2.0","method":' + _encode(method)
    body = b"" if params is None else b',"params":' + _encode(params)
    return head + body + b',"id":' + _encode(id) + b"}"


def encode_bridge_request(method: str, params: Any, id: str | int | float) -> bytes:
    """`{"jsonrpc","id","method","params"?}`: the order every reference bridge writes its upward requests in
    (`item/tool/call`, `interaction/request`; the bridge specs' §8.2), unlike the runtime's own."""
    body = b"" if params is None else b',"params":' + _encode(params)
    return b'{"jsonrpc":"2.0","id":' + _encode(id) + b',"method":' + _encode(method) + body + b"}"


RequestEncoder = Callable[[str, Any, str | int | float], bytes]


def encode_notification(method: str, params: Any = None) -> bytes:
    head = b'{"jsonrpc":"2.0","method":' + _encode(method)
    return head + (b"}" if params is None else b',"params":' + _encode(params) + b"}")


def encode_result(id: str | int | float, result: Any) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + _encode(id) + b',"result":' + _encode(result) + b"}"


def encode_error(id: str | int | float, error: RpcError) -> bytes:
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.data is not None:
        body["data"] = error.data
    return b'{"jsonrpc":"2.0","id":' + _encode(id) + b',"error":' + _encode(body) + b"}"


def _peer_error(raw: msgspec.Raw) -> RpcError | None:
    """The error a response carries, or None when its `error` is falsy (§1.6)."""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return RpcError(BRIDGE_ERROR, bytes(raw).decode("utf-8", errors="replace"))
    if not value:
        return None
    if isinstance(value, dict):
        code, message = value.get("code"), value.get("message")
        if isinstance(message, str):
            if type(code) is float and code.is_integer():
                code = int(code)
            if type(code) is int:
                return RpcError(code, message, value.get("data"))
            return RpcError(BRIDGE_ERROR, message, value.get("data"))
    return RpcError(BRIDGE_ERROR, _encode(value).decode())


# -- the connection (trio shell) ---------------------------------------------


class _Default(enum.Enum):
    TOKEN = enum.auto()


DEFAULT = _Default.TOKEN  # `timeout=` placeholder: the connection's default timeout


class _Pending:
    __slots__ = ("done", "error", "on_result", "result")

    def __init__(self, on_result: Callable[[msgspec.Raw], None] | None = None) -> None:
        self.done = trio.Event()
        self.result: msgspec.Raw = _NULL
        self.error: RpcError | None = None
        self.on_result = on_result

    def settle(self, result: msgspec.Raw, error: RpcError | None) -> None:
        if not self.done.is_set():
            self.result, self.error = result, error
            self.done.set()


RequestHandler = Callable[[Request], Awaitable[Any]]
NotificationHandler = Callable[[list[Notification]], Awaitable[None]]
JunkHandler = Callable[[bytes, str], None]


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
    ) -> None:
        """`typed` decodes its notification methods in the framing pass: such a line is parsed once instead of
        twice (a line that does not decode so, or that its screen sends on, takes the generic path unchanged).
        `encode_request` writes our requests: the runtime's member order by default, `encode_bridge_request` for
        a bridge. `respond` takes each answer to a request (one encoded line, no terminator) for the owner to write
        in order with its own queued lines; without it an answer is written at once. `fileno` gives the send
        stream's non-blocking descriptor (-1 once closed), for `write_now`."""
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
        self._next_id = 0
        self._pending: dict[str | int | float, _Pending] = {}
        self._nursery: trio.Nursery | None = None
        self._typed = typed
        self._encode_request = encode_request
        self._respond = respond
        self._fileno = fileno
        self._unsent = b""  # what the stream did not take of a `write_now`: the next write sends it first

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
        id: str | int | float | None = None,
    ) -> Any:
        """Send a request and return its result decoded to builtins."""
        return msgspec.json.decode(await self.request_raw(method, params, timeout=timeout, id=id))

    async def request_raw(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float | _Default | None = DEFAULT,
        id: str | int | float | None = None,
        on_result: Callable[[msgspec.Raw], None] | None = None,
    ) -> msgspec.Raw:
        """Send a request and return its result undecoded (the caller decodes into its own type).

        `on_result` runs in the reader, as the success response is read: after every message before it and
        before any after it (state a result changes must be in place for the peer's next notifications).
        Raises `RpcError` as the peer sent it, `RequestTimeout`, or `ConnectionClosed`.
        """
        if self.closed:
            raise ConnectionClosed(f"JSON-RPC connection {self.name!r} is closed")
        if id is None:
            self._next_id += 1
            id = self._next_id
        if id in self._pending:
            raise ValueError(f"request id {id!r} is already outstanding on {self.name!r}")
        slot = self._pending[id] = _Pending(on_result)
        limit = self._default_timeout if timeout is DEFAULT else timeout
        try:
            await self._write(self._encode_request(method, params, id))
            with trio.move_on_after(math.inf if limit is None else limit):
                await slot.done.wait()
        finally:
            if self._pending.get(id) is slot:
                del self._pending[id]
        if not slot.done.is_set():
            raise RequestTimeout(method)
        if slot.error is not None:
            raise slot.error.with_traceback(None)  # one instance may fail many requests
        return slot.result

    async def notify(self, method: str, params: Any = None) -> None:
        await self._write(encode_notification(method, params))

    async def send_lines(self, lines: list[bytes]) -> None:
        """Write pre-encoded messages (no terminators) in one `send_all`, so they stay contiguous, after what a
        `write_now` left."""
        if lines or self._unsent:
            await self._write(*lines)

    @property
    def unsent(self) -> bool:
        """True while part of a `write_now` waits for the next `send_lines`."""
        return bool(self._unsent)

    def write_now(self, lines: list[bytes]) -> bool:
        """Writes pre-encoded messages at once, with no task switch or scheduler pass, when nothing else is being
        written: True when they were taken (written, or their unwritten tail kept for the next `send_lines`, see
        `unsent`; to a peer that stopped reading, dropped as `_write` drops them); False, writing nothing, when a
        write is under way, the stream is full or has no descriptor.

        A client's writer task woke, took the lock, and yielded to the scheduler twice around each send; at a
        thousand streaming threads that was a tenth of the daemon's CPU."""
        if self._fileno is None or self._write_closed or self._aclosed or self._unsent or self._torn:
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
            return True
        if sent < len(data):
            self._unsent = data[sent:]
        return True

    def fail_pending(self, error: RpcError) -> None:
        """Fail every outstanding request with `error`, e.g. naming the exit status once it is known."""
        for slot in self._pending.values():
            slot.settle(_NULL, error)
        self._pending.clear()

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
        while True:
            try:
                data = await self._receive.receive_some()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                break
            if not data:
                break
            await self._dispatch(reader.feed(data))
        await self._dispatch(reader.close())

    def _typed_read(self, lines: Sequence[bytes | Overflow]) -> list[Notification] | None:
        """A read whose every line is a typed notification, decoded in one call as one JSON array (a read of a
        streaming bridge mostly is); None, for the line by line path, when one line is not (or may not be)."""
        typed = self._typed
        if typed is None or len(lines) < 2:
            return None
        screen = typed.screen
        for line in lines:  # the line path's own checks (an array around them adds one level: msgspec takes it)
            if type(line) is not bytes or (len(line) > MAX_JSON_DEPTH and too_deep(line)):
                return None
        joined = b",".join(cast("list[bytes]", lines))
        if sum(joined.count(tag) for tag in typed.tags) != len(lines):
            return None
        if screen is not None and screen(joined) is not None:
            return None
        try:
            messages = typed.many(b"[" + joined + b"]")
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None
        members, batch = typed.members, []
        for message in messages:
            if type(message.id) in _ID_TYPES:
                return None  # a request: the line by line path serves it in order
            batch.append(Notification(members[type(message)], None, message.params))
        return batch

    async def _dispatch(self, lines: Sequence[bytes | Overflow]) -> None:
        typed_read = self._typed_read(lines)
        if typed_read is not None:
            await self._flush(typed_read)
            return
        batch: list[Notification] = []
        typed = self._typed.one if self._typed is not None else None
        typed_methods = self._typed.members if self._typed is not None else {}
        screen = self._typed.screen if self._typed is not None else None
        for line in lines:
            if isinstance(line, Overflow):
                reason = f"discarded an oversized JSON-RPC line ({line.size} bytes, limit {self._max_line})"
                await self._refuse(line.head, reason, INVALID_REQUEST, f"Invalid Request: {reason}")
                continue
            if len(line) > MAX_JSON_DEPTH and too_deep(line):  # a shorter line cannot be (each level takes a byte)
                reason = f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
                await self._refuse(line, reason, INVALID_REQUEST, f"Invalid Request: {reason}")
                continue
            if typed is not None and (screen is None or screen(line) is None):
                try:
                    message = typed(line)
                except (msgspec.ValidationError, msgspec.DecodeError):
                    pass  # another message, or invalid params: the generic path below classifies it
                else:
                    if type(message.id) not in _ID_TYPES:
                        batch.append(Notification(typed_methods[type(message)], None, message.params))
                        continue
            try:
                env = _decode_envelope(line)
            except msgspec.ValidationError:
                self._junk(line, "not a JSON object")
                continue
            except msgspec.DecodeError as exc:
                mended = mend_surrogates(line)
                if mended is not None:
                    self._log.warning("replaced lone UTF-16 surrogates with U+FFFD", bytes=len(line))
                    batch = await self._flush(batch)  # keep arrival order
                    await self._dispatch([mended])
                elif line.strip():
                    await self._refuse(line, f"not JSON ({exc})", PARSE_ERROR, f"Parse error: {exc}")
                continue
            method, id = env.method, env.id
            if type(method) is str and method:
                params = env.params if env.params else None
                if type(id) not in _ID_TYPES:
                    batch.append(Notification(method, params))
                    continue
                batch = await self._flush(batch)
                assert self._nursery is not None
                await self._nursery.start(self._serve, Request(id, method, params))
            elif _valid_id(id) and not method:
                batch = await self._flush(batch)
                self._settle(id, env)
            elif isinstance(method, str):
                batch.append(Notification(method, env.params if env.params else None))
            else:
                self._junk(line, "not a JSON-RPC message")
                if self._answer_junk and _valid_id(id):
                    await self._write(encode_error(id, RpcError(INVALID_REQUEST, "Invalid Request")))
        await self._flush(batch)

    async def _flush(self, batch: list[Notification]) -> list[Notification]:
        if batch and self._on_notifications is not None:
            try:
                await self._on_notifications(batch)
            except Exception:
                self._log.exception("notification handler failed", methods=sorted({n.method for n in batch}))
        return []

    def _settle(self, id: Any, env: _Envelope) -> None:
        slot = self._pending.pop(id, None)
        if slot is None:
            return  # unknown or timed-out id: ignored, never answered
        error = _peer_error(env.error) if env.error else None
        result = env.result if env.result else _NULL
        if error is None and slot.on_result is not None:
            try:
                slot.on_result(result)
            except Exception:
                self._log.exception("a response's in-order handler failed", id=id)
        slot.settle(result, error)

    async def _refuse(self, line: bytes, reason: str, code: int, message: str) -> None:
        """Junk that may still carry a readable id: answered with it when this side answers junk."""
        self._junk(line, reason)
        if self._answer_junk:
            id = recover_id(line)
            if id is not None:
                await self._write(encode_error(id, RpcError(code, message)))

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
