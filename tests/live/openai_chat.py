"""A scripted OpenAI Chat Completions server for live tests of the real pi CLI, fully offline.

`ScriptedChat` is a stdlib `ThreadingHTTPServer` on 127.0.0.1 (a free port) in a background thread. Every
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

import gzip
import itertools
import json
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Json = dict[str, Any]
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


@dataclass(frozen=True)
class Request:
    """One request the server saw."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any  # decoded JSON, the raw text when it is not JSON, None when empty
    at: float = field(default_factory=time.monotonic)

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


def _decode(raw: bytes, encoding: str) -> Any:
    if encoding == "gzip":
        raw = gzip.decompress(raw)
    elif encoding == "deflate":
        raw = zlib.decompress(raw)
    elif encoding:
        return f"<{len(raw)} bytes, content-encoding {encoding}>"
    if not raw:
        return None
    body = raw.decode("utf-8", "replace")
    try:
        return json.loads(body)
    except ValueError:
        return body


def _is_chat(path: str) -> bool:
    return path.split("?")[0].rstrip("/").endswith("/chat/completions")


class ScriptedChat:
    """The server: `push` answers, read `requests`/`posts()`; a context manager that starts and stops it."""

    def __init__(self, default: Answer | None = None) -> None:
        self.default: Answer = default if default is not None else (lambda request: text("ok"))
        self.requests: list[Request] = []
        self._script: deque[Answer] = deque()
        self._lock = threading.Condition()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The provider `baseUrl`: the OpenAI SDK appends `/chat/completions` to it."""
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *answers: Answer) -> None:
        """Queue answers for the next `POST /chat/completions`, in order (a callable computes its Reply)."""
        with self._lock:
            self._script.extend(answers)

    def pending(self) -> int:
        """Scripted answers not taken yet."""
        with self._lock:
            return len(self._script)

    def posts(self) -> list[Request]:
        """The `POST .../chat/completions` requests seen so far."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and _is_chat(r.path)]

    def wait_for_posts(self, count: int, timeout: float = 20.0) -> list[Request]:
        """Block until `count` posts were seen (AssertionError after `timeout` seconds)."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self.posts()) >= count, timeout):
                raise AssertionError(f"{len(self.posts())} POST /chat/completions seen, wanted {count}")
            return self.posts()

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)
            self._lock.notify_all()

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self._record(request)
            answer = self._script.popleft() if self._script else self.default
        return answer(request) if callable(answer) else answer

    def __enter__(self) -> ScriptedChat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def _handler(server: ScriptedChat) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: each answer ends by closing the connection, so an SSE stream needs no length or chunking.
        protocol_version = "HTTP/1.0"
        timeout = 30  # a client that stalls mid-request frees the thread

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _request(self) -> Request:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = _decode(raw, (self.headers.get("Content-Encoding") or "").lower())
            return Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)

        def _json(self, status: int, body: Json, headers: tuple[tuple[str, str], ...] = ()) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _not_found(self) -> None:
            message = f"Invalid URL ({self.command} {self.path})"
            self._json(
                404, {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
            )

        def do_POST(self) -> None:
            request = self._request()
            if not _is_chat(self.path):
                server._record(request)
                self._not_found()
                return
            reply = server._next(request)
            try:
                if reply.status != 200:
                    self._json(reply.status, reply.error or {}, reply.headers)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Cache-Control", "no-cache")
                for name, value in reply.headers:
                    self.send_header(name, value)
                self.end_headers()
                streaming = False
                for chunk in reply.chunks:
                    if streaming and reply.delay and server._stopping.wait(reply.delay):
                        return
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
                    streaming = streaming or any(delta.get(k) for k in ("content", "reasoning_content", "tool_calls"))
                if reply.done:
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away (an aborted turn)

        def do_GET(self) -> None:
            server._record(self._request())
            self._not_found()

        do_DELETE = do_PUT = do_PATCH = do_GET

    return Handler
