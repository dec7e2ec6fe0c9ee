"""A scripted Anthropic Messages API server for live tests of real agent CLIs, fully offline.

It listens on 127.0.0.1 only (a free port), in a background thread, and answers like the real API:

* `POST /v1/messages` with `"stream": true`: Server-Sent Events (`message_start`, then per content block
  `content_block_start` / `content_block_delta` / `content_block_stop`, a `ping`, `message_delta` with the
  `stop_reason` and usage, `message_stop`), chunked, for `text` (text_delta), `thinking` (thinking_delta then
  signature_delta) and `tool_use` (input_json_delta) blocks;
* `POST /v1/messages` without `stream`: the whole Message as JSON;
* `POST /v1/messages/count_tokens`: `{"input_tokens": n}`;
* anything else: 404 with the API's JSON error body (so no client ever waits on this server);
* a scripted `Failure`: that HTTP status with `{"type":"error","error":{"type":…,"message":…},"request_id":…}`,
  or (``in_stream=True``) a 200 stream that breaks off with an SSE `error` event.

The answers are a queue the test pushes (`server.script(...)`), taken in order by each `POST /v1/messages`
that `consumes` (by default every one); when the queue is empty the `default` answer is served. Every request
is recorded (`server.requests`, `server.messages()`), with its parsed body, so tests can assert what the client
sent. Usable from sync tests (`with AnthropicServer() as server:`) and trio tests (same, plus
`await server.wait_messages_async(n)`); every wait has a timeout and `stop()` (the context exit) ends the server,
breaking off any stream still being delayed.

    with AnthropicServer() as server:
        server.script(reply(thinking("Let me think."), text("Hel", "lo")))
        server.script(tool_use("Bash", {"command": "echo hi"}), text("done"))  # two turns
        server.script(failure(401))
        ...
        first = server.wait_messages(1)[0]
        assert first.body["stream"] is True
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tests.live import scripted

__all__ = [
    "AnthropicServer",
    "Block",
    "Failure",
    "Reply",
    "Request",
    "Text",
    "Thinking",
    "ToolUse",
    "failure",
    "reply",
    "serving",
    "text",
    "thinking",
    "tool_use",
]

# The `error.type` the real API uses per HTTP status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
SIGNATURE = "c2lnbmF0dXJlLWxpdmUtdGVzdA=="  # a thinking block's signature (clients send it back verbatim)
ERROR_MESSAGES = {
    400: "Invalid request",
    401: "invalid x-api-key",
    403: "Your API key does not have permission to use the specified resource.",
    429: "Number of request tokens has exceeded your rate limit",
    500: "Internal server error",
    529: "Overloaded",
}


# -- the script ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """A `text` block, streamed as one `text_delta` per piece."""

    pieces: tuple[str, ...]

    @property
    def full(self) -> str:
        return "".join(self.pieces)


@dataclass(frozen=True)
class Thinking:
    """A `thinking` block: one `thinking_delta` per piece, then one `signature_delta`."""

    pieces: tuple[str, ...]
    signature: str = SIGNATURE

    @property
    def full(self) -> str:
        return "".join(self.pieces)


@dataclass(frozen=True)
class ToolUse:
    """A `tool_use` block; its input JSON is streamed as `input_json_delta`s ("" first, as the API does)."""

    name: str
    input: dict[str, Any]
    id: str | None = None  # minted (`toolu_live_0001`, ...) when None
    chunks: int = 2


Block = Text | Thinking | ToolUse


@dataclass(frozen=True)
class Reply:
    """One model answer. `delay` seconds pass before every event after `message_start` (so a client can
    interrupt mid-stream); `first_delay` before `message_start` itself (the headers go out at once)."""

    blocks: tuple[Block, ...]
    stop_reason: str | None = None  # None: "tool_use" when a block is a ToolUse, else "end_turn"
    delay: float = 0.0
    first_delay: float = 0.0
    input_tokens: int = 100
    output_tokens: int = 20
    headers: tuple[tuple[str, str], ...] = ()  # extra response headers (e.g. `anthropic-ratelimit-unified-*`)

    @property
    def effective_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(isinstance(b, ToolUse) for b in self.blocks) else "end_turn"


@dataclass(frozen=True)
class Failure:
    """An API error: the HTTP `status` with the API's JSON error body, or, with `in_stream`, a 200 SSE stream
    that sends `message_start` and then an `error` event (as an overloaded API does mid-answer)."""

    status: int = 401
    error_type: str = "authentication_error"
    message: str = "invalid x-api-key"
    headers: tuple[tuple[str, str], ...] = ()
    in_stream: bool = False


Answer = Reply | Failure
Computed = Callable[["Request"], Answer | Block]  # an answer made from the request it answers (e.g. a path it names)


def text(*pieces: str) -> Text:
    """A text block streamed in these pieces: `text("Hel", "lo")`."""
    return Text(pieces or ("",))


def thinking(*pieces: str, signature: str = SIGNATURE) -> Thinking:
    return Thinking(pieces or ("",), signature)


def tool_use(name: str, input: dict[str, Any], *, id: str | None = None, chunks: int = 2) -> ToolUse:
    return ToolUse(name, input, id, chunks)


def reply(
    *blocks: Block,
    stop_reason: str | None = None,
    delay: float = 0.0,
    first_delay: float = 0.0,
    input_tokens: int = 100,
    output_tokens: int = 20,
    headers: dict[str, str] | None = None,
) -> Reply:
    return Reply(blocks, stop_reason, delay, first_delay, input_tokens, output_tokens, tuple((headers or {}).items()))


def failure(
    status: int = 401,
    message: str | None = None,
    *,
    error_type: str | None = None,
    headers: dict[str, str] | None = None,
    in_stream: bool = False,
) -> Failure:
    """`failure(401)` answers as the real API does to a bad key; `failure(529, in_stream=True)` breaks a stream."""
    return Failure(
        status,
        error_type or ERROR_TYPES.get(status, "api_error"),
        message if message is not None else ERROR_MESSAGES.get(status, "Scripted error"),
        tuple((headers or {}).items()),
        in_stream,
    )


def as_answer(item: Answer | Block) -> Answer:
    """A bare block is a one-block reply."""
    return item if isinstance(item, Reply | Failure) else Reply((item,))


# -- what the server saw -------------------------------------------------------------------------------------------


@dataclass
class Request(scripted.Request):
    """One request as received, with what was served."""

    answer: Answer | None = None  # what a /v1/messages request got

    @property
    def is_messages(self) -> bool:
        return self.method == "POST" and self.path == "/v1/messages"

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and self.body.get("stream") is True

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", [])) if isinstance(self.body, dict) else []

    @property
    def tool_names(self) -> list[str]:
        tools = self.body.get("tools", []) if isinstance(self.body, dict) else []
        return [str(t.get("name")) for t in tools if isinstance(t, dict)]

    @property
    def system_text(self) -> str:
        """The system prompt's text blocks joined by newlines (or the string)."""
        system = self.body.get("system", "") if isinstance(self.body, dict) else ""
        if isinstance(system, str):
            return system
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))

    def blocks(self, kind: str, *, last_only: bool = True) -> list[dict[str, Any]]:
        """The content blocks of `type` kind in the user messages (only the last message by default)."""
        msgs = self.messages[-1:] if last_only else self.messages
        found: list[dict[str, Any]] = []
        for msg in msgs:
            content = msg.get("content")
            if msg.get("role") == "user" and isinstance(content, list):
                found += [b for b in content if isinstance(b, dict) and b.get("type") == kind]
        return found

    def tool_results(self) -> list[dict[str, Any]]:
        """The `tool_result` blocks of the last (user) message."""
        return self.blocks("tool_result")

    def user_text(self) -> str:
        """The text of the last user message (blocks joined by newlines)."""
        for msg in reversed(self.messages):
            if msg.get("role") == "user":
                content = msg.get("content")
                if isinstance(content, str):
                    return content
                return "\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
        return ""


def consumes_every_message(request: Request) -> bool:
    return True


# -- the server --------------------------------------------------------------------------------------------------


class AnthropicServer(scripted.ScriptedServer[Request, Answer | Block]):
    """The scripted API on `http://127.0.0.1:<port>` (`url`). Thread-safe; start/stop or use as a context."""

    request_type = Request
    name = "anthropic-live"

    def __init__(
        self,
        default: Answer | Block | None = None,
        *,
        consumes: Callable[[Request], bool] = consumes_every_message,
    ) -> None:
        super().__init__(as_answer(default if default is not None else text("OK")))
        self.consumes = consumes
        self._ids = itertools.count(1)

    @property
    def url(self) -> str:
        return f"http://{scripted.HOST}:{self.port}"

    def is_call(self, request: Request) -> bool:
        return request.is_messages

    def script(self, *answers: Answer | Block | Computed) -> None:
        """Queue answers (a bare block is a one-block reply; a function makes its answer from the request), served
        in order to consuming requests."""
        self.push(*answers)

    def messages(self) -> list[Request]:
        """The `POST /v1/messages` requests so far, in arrival order."""
        return self.posts()

    def wait_messages(self, n: int, timeout: float = 10.0, *, finished: bool = False) -> list[Request]:
        """Block until at least `n` `POST /v1/messages` arrived (and, with `finished`, were fully answered)."""
        return self.wait_for_posts(n, timeout, finished=finished)

    async def wait_messages_async(self, n: int, timeout: float = 10.0, *, finished: bool = False) -> list[Request]:
        """`wait_messages` for trio code."""
        return await self.wait_for_posts_async(n, timeout, finished=finished)

    def _take(self, request: Request) -> Answer:
        request.answer = as_answer(self.take(request, self.consumes(request)))
        return request.answer

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}_live_{next(self._ids):04d}"


class _Handler(scripted.ScriptedHandler[AnthropicServer, Request]):
    protocol_version = "HTTP/1.1"

    def route(self, request: Request) -> None:
        owner = self.owner
        if request.method == "CONNECT":  # a proxy tunnel: the client tried to reach a non-loopback host. Refused.
            self.close_connection = True
            self.empty(request, 403, (("connection", "close"),))
        elif request.method == "HEAD":
            self.empty(request, 200)
        elif request.method == "GET":
            self._not_found(request)
        elif request.path == "/v1/messages/count_tokens":
            self._json(request, 200, {"input_tokens": max(1, len(request.raw) // 4)})
        elif request.path == "/v1/messages":
            answer = owner._take(request)
            if isinstance(answer, Failure) and not answer.in_stream:
                self._error(request, answer)
            elif request.stream:
                self._stream(request, answer)
            elif isinstance(answer, Reply):
                self._json(request, 200, self._message(request, answer), answer.headers)
            else:
                self._error(request, answer)
        else:
            self._not_found(request)

    # answers

    def _json(self, request: Request, status: int, obj: Any, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.json(request, status, obj, (("request-id", self.owner._next_id("req")), *headers))

    def _error_body(self, failure: Failure) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": failure.error_type, "message": failure.message},
            "request_id": self.owner._next_id("req"),
        }

    def _error(self, request: Request, failure: Failure) -> None:
        self._json(request, failure.status, self._error_body(failure), (("x-should-retry", "false"), *failure.headers))

    def _not_found(self, request: Request) -> None:
        failure = Failure(404, "not_found_error", f"Not found: {request.method} {request.path}")
        self._json(request, 404, self._error_body(failure))

    def _usage(self, reply: Reply, output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": reply.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output_tokens,
        }

    def _content(self, block: Block, tool_id: str | None) -> dict[str, Any]:
        if isinstance(block, Text):
            return {"type": "text", "text": block.full}
        if isinstance(block, Thinking):
            return {"type": "thinking", "thinking": block.full, "signature": block.signature}
        return {"type": "tool_use", "id": tool_id, "name": block.name, "input": block.input}

    def _tool_ids(self, reply: Reply) -> list[str | None]:
        owner = self.owner
        return [(b.id or owner._next_id("toolu")) if isinstance(b, ToolUse) else None for b in reply.blocks]

    def _message(self, request: Request, reply: Reply) -> dict[str, Any]:
        """A whole (non-streamed) Message."""
        ids = self._tool_ids(reply)
        return {
            "id": self.owner._next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": request.model or "claude-live",
            "content": [self._content(b, i) for b, i in zip(reply.blocks, ids, strict=True)],
            "stop_reason": reply.effective_stop_reason,
            "stop_sequence": None,
            "usage": {**self._usage(reply, reply.output_tokens), "service_tier": "standard"},
        }

    def _stream(self, request: Request, answer: Answer) -> None:
        owner = self.owner
        reply = answer if isinstance(answer, Reply) else Reply(())
        self.open_stream(request, (("request-id", owner._next_id("req")), *reply.headers))

        def event(kind: str, data: dict[str, Any], delay: float = reply.delay) -> None:
            owner.sleep(delay)
            self.event(json.dumps(data, separators=(",", ":")), kind)

        start: dict[str, Any] = {
            "id": owner._next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": request.model or "claude-live",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**self._usage(reply, 1), "service_tier": "standard"},
        }
        event("message_start", {"type": "message_start", "message": start}, reply.first_delay)
        if isinstance(answer, Failure):
            event("error", {"type": "error", "error": {"type": answer.error_type, "message": answer.message}})
            self.close_stream(request)
            return
        for index, (block, tool_id) in enumerate(zip(reply.blocks, self._tool_ids(reply), strict=True)):
            opened: dict[str, Any]
            if isinstance(block, Text):
                opened = {"type": "text", "text": ""}
            elif isinstance(block, Thinking):
                opened = {"type": "thinking", "thinking": "", "signature": ""}
            else:
                opened = {"type": "tool_use", "id": tool_id, "name": block.name, "input": {}}
            event("content_block_start", {"type": "content_block_start", "index": index, "content_block": opened})
            if index == 0:
                event("ping", {"type": "ping"})
            for delta in _deltas(block):
                event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            event("content_block_stop", {"type": "content_block_stop", "index": index})
        stop = {"stop_reason": reply.effective_stop_reason, "stop_sequence": None}
        usage = self._usage(reply, reply.output_tokens)
        event("message_delta", {"type": "message_delta", "delta": stop, "usage": usage})
        event("message_stop", {"type": "message_stop"})
        self.close_stream(request)


AnthropicServer.handler = _Handler


def _deltas(block: Block) -> Iterator[dict[str, Any]]:
    if isinstance(block, Text):
        for piece in block.pieces:
            yield {"type": "text_delta", "text": piece}
    elif isinstance(block, Thinking):
        for piece in block.pieces:
            yield {"type": "thinking_delta", "thinking": piece}
        yield {"type": "signature_delta", "signature": block.signature}
    else:
        data = json.dumps(block.input)
        size = max(1, -(-len(data) // max(1, block.chunks)))
        yield {"type": "input_json_delta", "partial_json": ""}
        for at in range(0, len(data), size):
            yield {"type": "input_json_delta", "partial_json": data[at : at + size]}


@contextlib.contextmanager
def serving(default: Answer | Block | None = None) -> Iterator[AnthropicServer]:
    """`with serving() as server:` — an `AnthropicServer` started for the block."""
    with AnthropicServer(default) as server:
        yield server
