"""What the scripted model servers share: HTTP on 127.0.0.1, the script queue, request recording, SSE writing.

A `ScriptedServer` listens on a free loopback port in a background thread. Each request is read (chunked or
sized, gzip/deflate undone, JSON parsed), recorded, and handed to its dialect's `ScriptedHandler.route`, which
answers in its own wire format (Anthropic Messages in `anthropic`, OpenAI Responses in `openai`, OpenAI Chat in
`openai_chat`). Answers a test queues (`push`) are taken in order by the model calls (`take`), the `default`
answering when the queue is empty; a queued function computes its answer from the request. Every wait is bounded,
and `stop()` (the context exit) ends the server, breaking off any stream still held or delayed.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar, cast
from urllib.parse import urlsplit

import trio

HOST = "127.0.0.1"
Json = dict[str, Any]
Headers = tuple[tuple[str, str], ...]


@dataclass
class Request:
    """One request as received, with how it was served."""

    method: str
    target: str  # the request line's target as sent
    path: str  # without the query string
    query: str
    headers: dict[str, str]  # lower-cased names
    raw: bytes
    body: Any  # decoded JSON, the text when it is not JSON, None when empty
    at: float  # time.monotonic() on arrival
    scripted: bool = False  # the answer was taken from the script (not the default)
    status: int = 0
    finished: bool = False  # the whole answer was written
    disconnected: bool = False  # the client went away (or the server stopped) before the answer ended

    @property
    def is_proxy_attempt(self) -> bool:
        """A request meant for another host: a CONNECT tunnel or an absolute-URI (proxied) request line."""
        return self.method == "CONNECT" or "://" in self.target


R = TypeVar("R", bound=Request)
A = TypeVar("A")
S = TypeVar("S", bound="ScriptedServer[Any, Any]")


def decode_body(raw: bytes, encoding: str) -> Any:
    """The body as JSON, else as text; None when empty; a placeholder for an encoding we do not undo."""
    with contextlib.suppress(OSError, zlib.error):
        if encoding == "gzip":
            raw = gzip.decompress(raw)
        elif encoding == "deflate":
            raw = zlib.decompress(raw)
    if encoding not in ("", "gzip", "deflate", "identity"):
        return f"<{len(raw)} bytes, content-encoding {encoding}>"
    if not raw:
        return None
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


class Stop(Exception):
    """The server is stopping: abandon the answer."""


class ScriptedServer(Generic[R, A]):
    """The server's lifecycle, script and record; a dialect subclass names its handler, request type and calls."""

    handler: ClassVar[type[ScriptedHandler[Any, Any]]]
    request_type: ClassVar[type[Request]] = Request
    name: ClassVar[str] = "scripted-api"

    def __init__(self, default: A | Callable[[R], A]) -> None:
        self.default = default
        self._script: deque[A | Callable[[R], A]] = deque()
        self._requests: list[R] = []
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd = _HTTPServer((HOST, 0), self.handler)
        self._httpd.owner = self
        self._thread: threading.Thread | None = None

    def is_call(self, request: R) -> bool:
        """A model call (what takes scripted answers): the dialect's endpoint."""
        raise NotImplementedError

    # lifecycle

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> Self:
        serve = self._httpd.serve_forever
        self._thread = threading.Thread(target=serve, kwargs={"poll_interval": 0.05}, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving: breaks off held and delayed streams, closes open connections, joins the serving thread."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout)
            self._thread = None
        with self._cond:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # the script

    def push(self, *answers: A | Callable[[R], A]) -> None:
        """Queue answers for the next model calls, in order (a function computes its answer from the request)."""
        with self._cond:
            self._script.extend(answers)

    def pending(self) -> int:
        """How many queued answers are still untaken."""
        with self._cond:
            return len(self._script)

    def take(self, request: R, consumes: bool = True) -> A:
        """The next queued answer (when `consumes`), else the default; computed ones made from `request`."""
        with self._cond:
            request.scripted = consumes and bool(self._script)
            queued = self._script.popleft() if request.scripted else self.default
        return queued(request) if callable(queued) else queued

    # what was seen

    @property
    def requests(self) -> list[R]:
        with self._cond:
            return list(self._requests)

    def posts(self) -> list[R]:
        """The model calls so far, in arrival order."""
        return [r for r in self.requests if self.is_call(r)]

    def wait(self, predicate: Callable[[list[R]], bool], timeout: float = 10.0) -> list[R]:
        """Block until `predicate(all requests)` holds; TimeoutError (listing what was seen) after `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(list(self._requests)):
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [f"{r.method} {r.path} {r.status}" for r in self._requests]
                    raise TimeoutError(f"the API server did not see what was awaited in {timeout}s; it saw {seen}")
                self._cond.wait(min(left, 0.1))
            return list(self._requests)

    def wait_for_posts(self, count: int, timeout: float = 20.0, *, finished: bool = False) -> list[R]:
        """Block until at least `count` model calls arrived (and, with `finished`, were fully answered)."""

        def enough(requests: list[R]) -> bool:
            calls = [r for r in requests if self.is_call(r)]
            return len(calls) >= count and (not finished or all(r.finished or r.disconnected for r in calls[:count]))

        return [r for r in self.wait(enough, timeout) if self.is_call(r)]

    async def wait_for_posts_async(self, count: int, timeout: float = 10.0, *, finished: bool = False) -> list[R]:
        """`wait_for_posts` for trio code (in a worker thread; the wait itself is bounded by `timeout`)."""
        return await trio.to_thread.run_sync(
            lambda: self.wait_for_posts(count, timeout, finished=finished), abandon_on_cancel=True
        )

    # used by the handler

    def record(self, request: R) -> None:
        with self._cond:
            self._requests.append(request)
            self._cond.notify_all()

    def changed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def sleep(self, seconds: float) -> None:
        """Sleep unless the server stops first (then `Stop`): a held or delayed stream."""
        if self._stopping.wait(seconds) if seconds > 0 else self._stopping.is_set():
            raise Stop


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    owner: ScriptedServer[Any, Any]


class ScriptedHandler(BaseHTTPRequestHandler, Generic[S, R]):
    """Reads and records each request, then `route`s it; writes JSON answers and SSE streams.

    Over HTTP/1.1 a stream is chunked; over HTTP/1.0 it ends by closing the connection."""

    server: _HTTPServer
    timeout = 30  # a stalled or idle client frees the thread after this long

    @property
    def owner(self) -> S:
        return cast(S, self.server.owner)

    def route(self, request: R) -> None:
        """Answer `request` in the dialect's wire format."""
        raise NotImplementedError

    def setup(self) -> None:
        super().setup()
        with self.owner._cond:
            self.owner._connections.add(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        with self.owner._cond:
            self.owner._connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        request = self._read()
        try:
            self.route(request)
        except (Stop, OSError):
            request.disconnected = True
            self.close_connection = True
            self.owner.changed()

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_CONNECT = _serve

    def _read(self) -> R:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            raw = b""
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                raw += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        body = decode_body(raw, self.headers.get("content-encoding", "").lower())
        url = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        request: R = self.owner.request_type(  # type: ignore[assignment]
            self.command, self.path, url.path, url.query, headers, raw, body, time.monotonic()
        )
        self.owner.record(request)
        return request

    def done(self, request: R) -> None:
        request.finished = True
        self.owner.changed()

    def json(self, request: R, status: int, body: Any, headers: Headers = ()) -> None:
        """A whole JSON answer."""
        data = json.dumps(body).encode()
        request.status = status
        self.send_response(status)
        self.send_header("content-type", "application/json")
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        self.done(request)

    def empty(self, request: R, status: int, headers: Headers = ()) -> None:
        """An answer without a body."""
        request.status = status
        self.send_response(status)
        self.send_header("content-length", "0")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.done(request)

    def open_stream(self, request: R, headers: Headers = ()) -> None:
        """A 200 SSE answer's headers."""
        request.status = 200
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        if self.protocol_version == "HTTP/1.1":
            self.send_header("transfer-encoding", "chunked")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()

    def event(self, data: str, kind: str | None = None) -> None:
        """One SSE event: `event: kind` (when given) and `data: data`."""
        self._write(((f"event: {kind}\n" if kind else "") + f"data: {data}\n\n").encode())

    def close_stream(self, request: R) -> None:
        if self.protocol_version == "HTTP/1.1":
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        self.done(request)

    def _write(self, payload: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload) if self.protocol_version == "HTTP/1.1" else payload)
        self.wfile.flush()
