"""A JSON-RPC peer's state, sans-IO: what a read's lines mean (`Inbound`) and which of our requests await an
answer (`Calls`). No trio, no I/O: `bbridge.wire.rpc.Connection` drives both, and writes and waits itself.

Decisions the spec leaves open, fixed here:

* Ordering. A read's messages come out in wire order. Consecutive notifications come out as one batch; a
  response or a request ends the batch (the batch comes first), so a response is never observed before the
  notifications that preceded it (e.g. the settling deltas of an interrupt before the `thread/stop` answer).
  A read of notifications only, the streaming hot path, is exactly one batch.
* Junk. Lines that are not JSON, not an object, nested deeper than `MAX_JSON_DEPTH`, oversized, or no valid
  JSON-RPC message come out as `Junk`, with the error to answer it with where it may carry a readable id: -32700
  for a line that does not decode (its id recovered leniently from its text, as `recover_id` says), -32600 for
  the rest, an oversized line included (its id read from the first `HEAD_BYTES`, which `LineReader` keeps).
* Blank lines (whitespace only) are skipped silently.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import msgspec

from bbridge.core.nesting import MAX_JSON_DEPTH, too_deep
from bbridge.wire.delta_decoder import TypedDecoder
from bbridge.wire.framing import MAX_LINE_BYTES, Overflow
from bbridge.wire.jsonrpc import (
    ID_TYPES,
    INVALID_REQUEST,
    NULL,
    PARSE_ERROR,
    Id,
    Notification,
    Request,
    RpcError,
    decode_envelope,
    mend_surrogates,
    peer_error,
    valid_id,
)

# -- inbound: a read's lines, classified -------------------------------------


class Response(NamedTuple):
    """An answer to one of our requests: `result` and `error` as they were on the line (empty when absent)."""

    id: Id
    result: msgspec.Raw
    error: msgspec.Raw


class Junk(NamedTuple):
    """A line that is no JSON-RPC message. `code` and `message`: the error to answer it with, when this side
    answers junk (None: never answered); `id`: the id to answer, None to recover it from `line` (`recover_id`)."""

    line: bytes
    reason: str
    code: int | None = None
    message: str = ""
    id: Id | None = None


class Mended(NamedTuple):
    """The next messages came from a line of `size` bytes whose lone UTF-16 surrogates became U+FFFD."""

    size: int


Event = list[Notification] | Request | Response | Junk | Mended


def _no_typed_read(lines: object) -> None:
    return None


class Inbound:
    """Classifies each read's lines into events, in wire order (see the module docstring).

    `typed` decodes its notification methods in the same pass (`bbridge.wire.delta_decoder`): such a line is parsed
    once instead of twice; a line that does not decode so, or that its screen sends on, is classified unchanged.
    A read of typed notifications only is one batch, decoded in one call by `typed_read` (None for any other
    read): the driver tries it first, so the streaming hot path costs one call per read and no event list.
    """

    def __init__(self, typed: TypedDecoder | None = None, max_line: int = MAX_LINE_BYTES) -> None:
        self.typed = typed
        self.max_line = max_line
        self.typed_read: Callable[[Sequence[bytes | Overflow]], list[Notification] | None] = (
            _no_typed_read if typed is None else typed.read
        )
        self.typed_whole: Callable[[bytes | bytearray], list[Notification] | None] = (
            _no_typed_read if typed is None else typed.read_whole
        )

    def receive(self, lines: Sequence[bytes | Overflow]) -> list[Event]:
        """The events of one read's lines, classified line by line (its last notifications are a batch too)."""
        typed = self.typed
        events: list[Event] = []
        batch: list[Notification] = []
        one = typed.one if typed is not None else None
        screen = typed.screen if typed is not None else None
        for line in lines:
            if isinstance(line, Overflow):
                reason = f"discarded an oversized JSON-RPC line ({line.size} bytes, limit {self.max_line})"
                events.append(Junk(line.head, reason, INVALID_REQUEST, f"Invalid Request: {reason}"))
                continue
            if len(line) > MAX_JSON_DEPTH and too_deep(line):  # a shorter line cannot be (each level takes a byte)
                reason = f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
                events.append(Junk(line, reason, INVALID_REQUEST, f"Invalid Request: {reason}"))
                continue
            if one is not None and (screen is None or screen(line) is None):
                try:
                    batch.append(one(line))
                    continue
                except (msgspec.ValidationError, msgspec.DecodeError):
                    pass  # another message, a request or invalid params: the generic path below classifies it
            try:
                env = decode_envelope(line)
            except msgspec.ValidationError:
                events.append(Junk(line, "not a JSON object"))
                continue
            except msgspec.DecodeError as exc:
                mended = mend_surrogates(line)
                if mended is not None:
                    if batch:  # keep arrival order
                        events.append(batch)
                        batch = []
                    events.append(Mended(len(line)))
                    events += self.receive([mended])
                elif line.strip():
                    events.append(Junk(line, f"not JSON ({exc})", PARSE_ERROR, f"Parse error: {exc}"))
                continue
            method, id = env.method, env.id
            if type(method) is str and method:
                params = env.params if env.params else None
                if type(id) not in ID_TYPES:
                    batch.append(Notification(method, params))
                    continue
                if batch:
                    events.append(batch)
                    batch = []
                events.append(Request(id, method, params))
            elif valid_id(id) and not method:
                if batch:
                    events.append(batch)
                    batch = []
                events.append(Response(id, env.result, env.error))
            elif isinstance(method, str):
                batch.append(Notification(method, env.params if env.params else None))
            else:
                valid = valid_id(id)
                events.append(
                    Junk(
                        line,
                        "not a JSON-RPC message",
                        INVALID_REQUEST if valid else None,
                        "Invalid Request",
                        id if valid else None,
                    )
                )
        if batch:
            events.append(batch)
        return events


# -- correlation: our requests and their answers -----------------------------


class Call:
    """One request of ours awaiting its answer; `wake` tells the waiter it is settled."""

    __slots__ = ("done", "error", "on_result", "result", "wake")

    def __init__(self, wake: Callable[[], object], on_result: Callable[[msgspec.Raw], None] | None) -> None:
        self.done = False
        self.result: msgspec.Raw = NULL
        self.error: RpcError | None = None
        self.wake = wake
        self.on_result = on_result

    def settle(self, result: msgspec.Raw, error: RpcError | None) -> None:
        if not self.done:
            self.result, self.error, self.done = result, error, True
            self.wake()


class Calls:
    """The outstanding requests of one connection, keyed by id; ids are minted from a counter unless given."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._next_id = 0
        self._open: dict[Id, Call] = {}

    def open(
        self, id: Id | None, wake: Callable[[], object], on_result: Callable[[msgspec.Raw], None] | None = None
    ) -> tuple[Id, Call]:
        """A new outstanding request (its id minted when None); a given id still outstanding is refused."""
        if id is None:
            self._next_id += 1
            id = self._next_id
        if id in self._open:
            raise ValueError(f"request id {id!r} is already outstanding on {self.name!r}")
        call = self._open[id] = Call(wake, on_result)
        return id, call

    def close(self, id: Id, call: Call) -> None:
        """Forget `call` (answered, timed out or cancelled): a late answer to its id is ignored."""
        if self._open.get(id) is call:
            del self._open[id]

    def answer(self, response: Response) -> Call | None:
        """The call `response` answers, settled with its result or error; None for an unknown or timed-out id
        (ignored, never answered)."""
        call = self._open.pop(response.id, None)
        if call is not None:
            error = peer_error(response.error) if response.error else None
            call.settle(response.result if response.result else NULL, error)
        return call

    def fail(self, id: Id, error: RpcError) -> Call | None:
        """The call `id` names, settled with `error` this side found (its answer came unreadable: over the line bound,
        not JSON); None for an unknown or timed-out id."""
        call = self._open.pop(id, None)
        if call is not None:
            call.settle(NULL, error)
        return call

    def fail_all(self, error: RpcError) -> None:
        """Settle every outstanding call with `error`."""
        for call in self._open.values():
            call.settle(NULL, error)
        self._open.clear()
