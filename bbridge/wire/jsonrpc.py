"""JSON-RPC 2.0 messages (protocol.md §1, daemon.md §1), sans-IO: the error codes and classes, the message
types a handler receives, the envelope a line is classified by, ids, and the encoders. No trio, no I/O.

* An id is a string or a number (`ID_TYPES`); null or anything else makes a message with a `method` a
  notification and a message without one junk. Nothing is ever answered with id null: hygiene (§1.8 rule 3)
  says a non-JSON line is ignored, and a null-id error is itself unclassifiable junk to the peer.
* A line that does not decode may still be answered by the id it carries (`recover_id`), or, when it reads as
  an answer, fail the request it answered (`recover_answer_id`); a line a JavaScript bridge wrote with a lone
  UTF-16 surrogate is mended rather than lost (`mend_surrogates`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import UNSET

from bbridge.wire.framing import HEAD_BYTES

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
BRIDGE_ERROR = -32000
NO_ACTIVE_TURN = -32001
SESSION_NOT_RESTORABLE = -32002
FORK_CHECKPOINT_UNSUPPORTED = -32003

# -- errors ------------------------------------------------------------------


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


# -- messages ----------------------------------------------------------------


class Request(msgspec.Struct, gc=False):
    id: str | int | float
    method: str
    params: msgspec.Raw | None  # None when the key was absent


class Notification(msgspec.Struct, gc=False):
    method: str
    params: msgspec.Raw | None
    # The params already decoded, for a method the connection decodes while framing (`delta_decoder.TypedDecoder`);
    # `params` is None then: the line was parsed once, into this value.
    decoded: Any = None


class Envelope(msgspec.Struct, gc=False):
    """Any JSON object; only the members that classify a message are looked at (`jsonrpc` is not checked)."""

    id: Any = UNSET
    method: Any = UNSET
    params: msgspec.Raw = msgspec.Raw()
    result: msgspec.Raw = msgspec.Raw()
    error: msgspec.Raw = msgspec.Raw()


decode_envelope = msgspec.json.Decoder(Envelope).decode
_encode = msgspec.json.Encoder().encode
NULL = msgspec.Raw(b"null")

Id = str | int | float
ID_TYPES = frozenset({str, int, float})  # tested as `type(id) in ID_TYPES`: bool is no id


def valid_id(value: Any) -> bool:
    return type(value) in ID_TYPES


_KEY_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,256}"|-?\d{1,20}(?:\.\d{1,20})?(?:[eE][+-]?\d{1,3})?)')


_KEY_METHOD = re.compile(rb'"method"\s*:')
_KEY_ANSWER = re.compile(rb'"(?:result|error)"\s*:')

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


def _top_level(text: bytes) -> tuple[bytes, int] | None:
    """A line's first `HEAD_BYTES` (leading whitespace gone) and where its first nested object or array opens; None
    when it is no object."""
    head = text[:HEAD_BYTES].lstrip()
    if not head.startswith(b"{"):
        return None
    return head, min((i for i in (head.find(b"{", 1), head.find(b"[", 1)) if i > 0), default=len(head))


def recover_id(text: bytes) -> Id | None:
    """The id of a line that cannot be decoded, read leniently from its first `HEAD_BYTES`.

    Taken only from the top level: the object's first member named `"id"`
    before any nested object or array opens (members after params are not
    reached: the answer then goes unsent, as for a line with no id).
    """
    top = _top_level(text)
    return None if top is None else _id_before(*top)


def _id_before(head: bytes, nested: int) -> Id | None:
    """The first top-level `"id"` member of a line's head, before its first nested object or array."""
    match = _KEY_ID.search(head, 1, nested)
    if match is None:
        return None
    try:
        value = msgspec.json.decode(match.group(1).decode("utf-8", "replace"))
    except msgspec.DecodeError:
        return None
    return value if valid_id(value) else None


def recover_answer_id(text: bytes) -> Id | None:
    """The id of a line that cannot be decoded but reads as a response (a `result` or `error` member and no `method`
    before any nested object or array opens), as `recover_id` reads it: the request it answered can be failed
    rather than left waiting. None for anything else (a request's id is `recover_id`'s, to answer it)."""
    top = _top_level(text)
    if top is None:
        return None
    head, nested = top
    if _KEY_METHOD.search(head, 1, nested) is not None or _KEY_ANSWER.search(head, 1, nested) is None:
        return None
    return _id_before(head, nested)


def peer_error(raw: msgspec.Raw) -> RpcError | None:
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


# -- encoders ----------------------------------------------------------------


def encode_request(method: str, params: Any, id: Id) -> bytes:
    """`{"jsonrpc","method","params"?,"id"}`, the runtime's key order; `params` omitted when None."""
    head = b'{"jsonrpc":"2.0","method":' + _encode(method)
    body = b"" if params is None else b',"params":' + _encode(params)
    return head + body + b',"id":' + _encode(id) + b"}"


def encode_bridge_request(method: str, params: Any, id: Id) -> bytes:
    """`{"jsonrpc","id","method","params"?}`: the order every reference bridge writes its upward requests in
    (`item/tool/call`, `interaction/request`; the bridge specs' §8.2), unlike the runtime's own."""
    body = b"" if params is None else b',"params":' + _encode(params)
    return b'{"jsonrpc":"2.0","id":' + _encode(id) + b',"method":' + _encode(method) + body + b"}"


RequestEncoder = Callable[[str, Any, Id], bytes]


def encode_notification(method: str, params: Any = None) -> bytes:
    head = b'{"jsonrpc":"2.0","method":' + _encode(method)
    return head + (b"}" if params is None else b',"params":' + _encode(params) + b"}")


def encode_result(id: Id, result: Any) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + _encode(id) + b',"result":' + _encode(result) + b"}"


def encode_error(id: Id, error: RpcError) -> bytes:
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.data is not None:
        body["data"] = error.data
    return b'{"jsonrpc":"2.0","id":' + _encode(id) + b',"error":' + _encode(body) + b"}"
