"""A scripted OpenAI Chat Completions server for live tests of the real pi CLI, fully offline.

`ScriptedChat` is a `tests.live.scripted` server on 127.0.0.1 (a free port) in a background thread. Every
`POST .../chat/completions` takes the next scripted answer (or the default) and answers it as the real API does
with `stream: true`: SSE `data: {chunk}` lines of `chat.completion.chunk` objects whose `choices[0].delta` carries
`reasoning_content` (what pi's `openai-completions` provider reads as thinking; it also accepts `reasoning` and
`reasoning_text`), `content`, or `tool_calls` with streamed `function.arguments`; then a chunk with the
`finish_reason`, a usage chunk (`choices: []`, as the API sends for `stream_options.include_usage`) and
`data: [DONE]`. Or an HTTP error with the API's JSON error body. Any other path gets a small JSON 404, so nothing
hangs. Every request is recorded (method, path, lower-cased headers, parsed body).

    with ScriptedChat() as api:
        api.push(text("Hello!", thinking="Greeting."))
        api.push(tool_call("bash", {"command": "echo hi"}), text("Done."))
        api.push(lambda request: text(f"{len(request.body['messages'])} messages"))  # computed from the request
        ... point pi at api.base_url ...
        api.wait_for_posts(1)

A `Reply` with `delay` stalls after its first content delta (`delay` seconds before each later chunk), to keep a
turn running, e.g. to abort it; a stalled stream ends at once when the server stops.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tests.live import scripted
from tests.live.scripted import Json

MODEL = "scripted-model"


@dataclass(frozen=True)
class Reply:
    """One scripted answer to a `POST /chat/completions`: SSE `chunks` (each a `data:` payload), or an HTTP error."""

    chunks: tuple[Json, ...] = ()
    status: int = 200
    error: Json | None = None  # the JSON body of an error answer (status != 200)
    headers: tuple[tuple[str, str], ...] = ()  # extra response headers (e.g. ("retry-after-ms", "10"))
    delay: float = 0.0  # seconds slept before each chunk after the first content delta: the stream stalls
    done: bool = True  # end with `data: [DONE]`


@dataclass
class Request(scripted.Request):
    """One request the server saw."""

    def last_user_text(self) -> str:
        """The text of the last `user` message of a chat request ('' when there is none)."""
        for message in reversed(self.body.get("messages", []) if isinstance(self.body, dict) else []):
            if message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))
        return ""


Answer = Reply | Callable[[Request], Reply]

_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}-{next(_ids):06d}"


def usage(prompt_tokens: int = 100, completion_tokens: int = 20, reasoning_tokens: int = 0, cached: int = 0) -> Json:
    """A Chat Completions `usage` object (`completion_tokens` includes the reasoning tokens, as in the API)."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def completion(
    deltas: Iterable[Json],
    finish_reason: str | None,
    *,
    model: str = MODEL,
    usage_: Json | None = None,
    delay: float = 0.0,
    done: bool = True,
) -> Reply:
    """Wrap `choices[0].delta` objects into chunks: a role chunk, the deltas, the finish chunk, the usage chunk."""
    base = {"id": _id("chatcmpl"), "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: Json, finish: str | None = None) -> Json:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""}), *(chunk(d) for d in deltas)]
    if finish_reason is not None:
        chunks.append(chunk({}, finish_reason))
        chunks.append({**base, "choices": [], "usage": usage_ if usage_ is not None else usage()})
    return Reply(tuple(chunks), delay=delay, done=done)


def _thinking_and_text(thinking: str | None, message: str | None, chunk: int) -> list[Json]:
    deltas = [{"reasoning_content": piece} for piece in _pieces(thinking or "", chunk)]
    return deltas + [{"content": piece} for piece in _pieces(message or "", chunk)]


def text(
    message: str,
    *,
    thinking: str | None = None,
    chunk: int = 4,
    delay: float = 0.0,
    model: str = MODEL,
    finish_reason: str = "stop",
) -> Reply:
    """An assistant message streamed in `chunk`-character `content` deltas, after optional `reasoning_content`."""
    reasoning = len(thinking or "") // 4
    return completion(
        _thinking_and_text(thinking, message, chunk),
        finish_reason,
        model=model,
        usage_=usage(completion_tokens=20 + reasoning, reasoning_tokens=reasoning),
        delay=delay,
    )


@dataclass(frozen=True)
class Call:
    """One tool call of a `tool_calls` reply."""

    name: str
    arguments: Json | str  # a dict is sent as JSON; a str as is (to send broken JSON)
    id: str = ""


def tool_calls(
    *calls: Call,
    thinking: str | None = None,
    preamble: str | None = None,
    chunk: int = 16,
    delay: float = 0.0,
    model: str = MODEL,
) -> Reply:
    """Tool calls (`finish_reason: tool_calls`): per call a first delta with id, type and name, then the
    arguments in `chunk`-character pieces; optionally after thinking and a short text."""
    deltas = _thinking_and_text(thinking, preamble, 8)
    for index, call in enumerate(calls):
        arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        first = {"index": index, "id": call.id or _id("call"), "type": "function"}
        deltas.append({"tool_calls": [{**first, "function": {"name": call.name, "arguments": ""}}]})
        deltas += [{"tool_calls": [{"index": index, "function": {"arguments": p}}]} for p in _pieces(arguments, chunk)]
    return completion(deltas, "tool_calls", model=model, delay=delay)


def tool_call(name: str, arguments: Json | str, *, call_id: str = "", **kw: Any) -> Reply:
    """One tool call; see `tool_calls`."""
    return tool_calls(Call(name, arguments, call_id), **kw)


def bash(command: str, *, call_id: str = "", **kw: Any) -> Reply:
    """A call of pi's `bash` tool."""
    return tool_call("bash", {"command": command}, call_id=call_id, **kw)


ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 429: "rate_limit_error", 500: "server_error"}


def http_error(
    status: int = 401,
    message: str | None = None,
    *,
    error_type: str | None = None,
    code: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> Reply:
    """An HTTP error answer with the API's JSON error body `{"error": {message, type, param, code}}`."""
    if message is None:
        message = {
            401: "Incorrect API key provided: sk-dummy. You can find your API key at the dashboard.",
            500: "The server had an error while processing your request. Sorry about that!",
        }.get(status, f"HTTP {status}")
    if code is None and status == 401:
        code = "invalid_api_key"
    kind = error_type or ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return Reply(status=status, error=body, headers=headers)


def _is_chat(path: str) -> bool:
    return path.rstrip("/").endswith("/chat/completions")


class ScriptedChat(scripted.ScriptedServer[Request, Reply]):
    """The server: `push` answers, read `requests`/`posts()`; a context manager that starts and stops it."""

    request_type = Request
    name = "openai-chat-live"

    def __init__(self, default: Answer | None = None) -> None:
        super().__init__(default if default is not None else (lambda request: text("ok")))

    @property
    def base_url(self) -> str:
        """The provider `baseUrl`: the OpenAI SDK appends `/chat/completions` to it."""
        return f"http://{scripted.HOST}:{self.port}/v1"

    def is_call(self, request: Request) -> bool:
        return request.method == "POST" and _is_chat(request.path)


class _Handler(scripted.ScriptedHandler[ScriptedChat, Request]):
    # HTTP/1.0: each answer ends by closing the connection, so an SSE stream needs no length or chunking.
    protocol_version = "HTTP/1.0"

    def route(self, request: Request) -> None:
        if not self.owner.is_call(request):
            message = f"Invalid URL ({request.method} {request.target})"
            error = {"message": message, "type": "invalid_request_error", "param": None, "code": None}
            self.json(request, 404, {"error": error})
            return
        reply = self.owner.take(request)
        if reply.status != 200:
            self.json(request, reply.status, reply.error or {}, reply.headers)
            return
        self.open_stream(request, reply.headers)
        streaming = False
        for chunk in reply.chunks:
            if streaming and reply.delay:
                self.owner.sleep(reply.delay)
            self.event(json.dumps(chunk))
            delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
            streaming = streaming or any(delta.get(k) for k in ("content", "reasoning_content", "tool_calls"))
        if reply.done:
            self.event("[DONE]")
        self.close_stream(request)


ScriptedChat.handler = _Handler
