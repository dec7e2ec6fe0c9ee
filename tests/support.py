"""Shared test support, one module: the runtime's side of a bridge, a daemon on a socket, common wire literals.

* `Runtime`, `in_process`, `spawned`: drive a bridge (a `kit.Bridge` in-process, or any bridge subprocess) as
  the daemon would, assembling what it emits.
* `running`, `connect`, `TestClient`: a daemon on a temporary Unix socket and a client that records what it is
  sent; `fake_provider` runs `tests/fakes/fake_bridge.py`.
* Literals several test files assert or send: the `full` execution options, `initialize` params, handshake
  capabilities on the wire, a presentation and a background-task item shape.
"""

from __future__ import annotations

import inspect
import json
import shutil
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from bbridge import kit
from bbridge.core import grammar as g
from bbridge.core.assembler import Assembler
from bbridge.core.events import Event
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.runtime import Daemon
from bbridge.daemon.server import serve_socket
from bbridge.wire import protocol, rpc
from tests.conftest import REPO

# -- wire literals -----------------------------------------------------------------


def creq(n: int) -> str:
    """The n-th client request id (the alphabet of `creq_` ids has no 0, 1, l or o)."""
    return f"creq_abcdefghj{'23456789ab'[n % 10]}"


# The permission option shapes of the recorded cells: full access, and accept-edits asking the user.
FULL = {"permissionMode": "full", "permissionScope": "full", "approvalReviewer": None, "permissionEscalation": None}
ASK = {"permissionMode": "accept-edits", "permissionScope": "workspace", "approvalReviewer": "user", "permissionEscalation": "ask"}  # fmt: skip
INIT = {"protocolVersion": 2, "client": {"name": "bb-test", "version": "0"}, "grammarVersions": [3, 3]}
PRES = {"label": {"pending": "P", "completed": "C"}, "icon": {"glyph": "G"}}
TASK = {
    "type": "backgroundTask",
    "familyId": "f",
    "taskType": "local_bash",
    "description": "d",
    "status": "pending",
    "taskStatus": "running",
    "skipTranscript": False,
}


def capabilities(**declared: Any) -> dict[str, Any]:
    """Handshake capabilities as a kit bridge writes them: the protocol's defaults (pinned in test_protocol), the
    kit's grammar [3, 3], and `declared` over them."""
    return {**msgspec.to_builtins(protocol.Capabilities()), "grammarVersions": [3, 3], **declared}


# -- the runtime's side of a bridge ------------------------------------------------


class Runtime:
    """Drives a bridge: requests, an ordered log of what came back, and one assembler for every thread."""

    def __init__(self, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream) -> None:
        self.log: list[tuple[str, str, Any]] = []  # ("note", method, params) / ("answer", method, result)
        self.deltas: dict[str, list[g.Delta]] = defaultdict(list)
        self.events: dict[str, list[Event]] = defaultdict(list)
        self.junk: list[bytes] = []
        self.assembler = Assembler("echo", entropy_prefix="E", text_delta_flush_ms=0)
        self.requests: list[tuple[str, Any]] = []  # the bridge's requests, in order
        self.resolution: Any = None  # their answer: None refuses (-32601), an RpcError fails, else the result
        self.conn = rpc.Connection(
            send,
            receive,
            name="runtime",
            on_request=self._on_request,
            on_notifications=self._on_notes,
            on_junk=lambda line, reason: self.junk.append(line),
        )
        self._tick = trio.Event()
        self._failure: Exception | None = None

    async def _on_request(self, request: rpc.Request) -> Any:
        self.requests.append((request.method, msgspec.json.decode(request.params or b"null")))
        if self.resolution is None:
            raise rpc.RpcError(rpc.METHOD_NOT_FOUND, f"Method not found: {request.method}")
        if isinstance(self.resolution, rpc.RpcError):
            raise self.resolution
        return self.resolution

    async def _on_notes(self, batch: list[rpc.Notification]) -> None:
        try:
            for note in batch:
                params = None if note.params is None else msgspec.json.decode(note.params)
                self.log.append(("note", note.method, params))
                if note.method == "thread/delta":
                    assert note.params is not None
                    decoded = g.decode_params(note.params)  # a test collector raises on invalid deltas
                    self.deltas[decoded.threadId].extend(decoded.deltas)
                    events = self.assembler.assemble(decoded.threadId, decoded.deltas)
                    self.events[decoded.threadId].extend(msgspec.to_builtins(events))
        except Exception as exc:
            self._failure = exc
        self._tick.set()
        self._tick = trio.Event()

    def check(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def call(self, method: str, params: Any = None, **kwargs: Any) -> Any:
        result = await self.conn.request(method, params, **kwargs)
        self.log.append(("answer", method, result))
        return result

    async def error(self, method: str, params: Any = None) -> rpc.RpcError:
        """The error a request is answered with (fails the test when it succeeds)."""
        with pytest.raises(rpc.RpcError) as info:
            await self.conn.request(method, params)
        return info.value

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            tick = self._tick
            await tick.wait()
            self.check()

    def types(self, thread_id: str) -> list[str]:
        return [e["type"] for e in self.events[thread_id]]

    def kinds(self, thread_id: str) -> list[str]:
        return [str(type(d).__struct_config__.tag) for d in self.deltas[thread_id]]

    def methods(self) -> list[str]:
        return [f"{what}:{method}" for what, method, _ in self.log]

    def notes(self, method: str) -> list[Any]:
        """The params of every `method` notification the bridge sent, in order."""
        return [params for what, name, params in self.log if what == "note" and name == method]


@asynccontextmanager
async def in_process(bridge: kit.Bridge) -> AsyncIterator[Runtime]:
    ours, theirs = trio.testing.memory_stream_pair()
    runtime = Runtime(ours.send_stream, ours.receive_stream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(bridge.serve, theirs.send_stream, theirs.receive_stream)
        nursery.start_soon(runtime.conn.run)
        yield runtime
        runtime.check()
        nursery.cancel_scope.cancel()


class Spawned:
    def __init__(self, runtime: Runtime, proc: trio.Process) -> None:
        self.runtime = runtime
        self.proc = proc
        self.stderr = bytearray()

    async def raw(self, line: bytes) -> None:
        """Write bytes straight to the bridge's stdin."""
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(line)

    async def finish(self) -> int:
        """Close the bridge's stdin and wait for it to exit."""
        assert self.proc.stdin is not None
        await self.proc.stdin.aclose()
        return await self.proc.wait()


@asynccontextmanager
async def spawned(argv: Sequence[str], env: dict[str, str] | None = None) -> AsyncIterator[Spawned]:
    """A bridge subprocess with a Runtime on its stdio; stderr is collected; killed if still running at the end."""
    proc = await trio.lowlevel.open_process(
        list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    child = Spawned(Runtime(proc.stdin, proc.stdout), proc)

    async def drain_stderr(stream: trio.abc.ReceiveStream) -> None:
        while data := await stream.receive_some():
            child.stderr += data

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child.runtime.conn.run)
            nursery.start_soon(drain_stderr, proc.stderr)
            yield child
            child.runtime.check()
            nursery.cancel_scope.cancel()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def start_thread(runtime: Runtime, thread_id: str = "thr_1") -> str:
    result = await runtime.call("thread/start", {"threadId": thread_id, "cwd": "/tmp", "options": FULL})
    provider_thread_id: str = result["providerThreadId"]
    return provider_thread_id


def turn_params(
    thread_id: str,
    provider_thread_id: str,
    text: str,
    creq: str = "creq_2222222223",
    options: dict[str, Any] = FULL,
) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "providerThreadId": provider_thread_id,
        "input": [{"type": "text", "text": text}],
        "clientRequestId": creq,
        "options": options,
    }


# -- a daemon on a socket ----------------------------------------------------------


FAKE = Path(__file__).parent / "fakes" / "fake_bridge.py"


def fake_provider(modes: str = "plain", **options: Any) -> ProviderConfig:
    return ProviderConfig(command=[sys.executable, str(FAKE), modes], **options)


class TestClient:
    __test__ = False

    def __init__(self, stream: trio.abc.Stream, answer: Callable[[rpc.Request], Any] | None = None) -> None:
        self.stream = stream
        self.entries: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.notes: list[tuple[str, Any]] = []
        self.requests: list[rpc.Request] = []
        self._answer = answer
        self.changed = trio.Condition()
        self.conn = rpc.Connection(
            stream, stream, name="test-client", on_notifications=self._on_notes, on_request=self._on_request
        )

    async def _on_notes(self, batch: list[rpc.Notification]) -> None:
        for note in batch:
            params = msgspec.json.decode(note.params) if note.params is not None else None
            if note.method == "thread/events":
                self.entries[params["threadId"]].extend(params["events"])
            else:
                self.notes.append((note.method, params))
        async with self.changed:
            self.changed.notify_all()

    async def _on_request(self, request: rpc.Request) -> Any:
        self.requests.append(request)
        if self._answer is None:
            raise rpc.RpcError(-32000, "test client does not answer")
        answer = self._answer(request)
        return await answer if inspect.isawaitable(answer) else answer

    def events(self, thread_id: str) -> list[dict[str, Any]]:
        return [entry["event"] for entry in self.entries[thread_id]]

    def types(self, thread_id: str) -> list[str]:
        return [event["type"] for event in self.events(thread_id)]

    def of(self, thread_id: str, kind: str) -> list[dict[str, Any]]:
        """The thread's events of one type."""
        return [event for event in self.events(thread_id) if event["type"] == kind]

    def settled(self, thread_id: str, count: int = 1) -> bool:
        """At least `count` of the thread's turns have completed."""
        return len(self.of(thread_id, "turn/completed")) >= count

    def text(self, thread_id: str) -> str:
        """The thread's streamed agent-message text, all of it."""
        return "".join(event["delta"] for event in self.of(thread_id, "item/agentMessage/delta"))

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 15) -> None:
        with trio.fail_after(timeout):
            async with self.changed:
                while not predicate():
                    await self.changed.wait()

    async def request(self, method: str, params: Any = None, **kw: Any) -> Any:
        return await self.conn.request(method, params, **kw)


@asynccontextmanager
async def connect(path: Path, answer: Callable[[rpc.Request], Any] | None = None) -> AsyncIterator[TestClient]:
    stream = await trio.open_unix_socket(str(path))
    client = TestClient(stream, answer)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.conn.run)
        yield client
        await client.conn.aclose()
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def running(
    tmp_path: Path, providers: dict[str, ProviderConfig], **options: Any
) -> AsyncIterator[tuple[Daemon, Path]]:
    options.setdefault("text_delta_flush_ms", 0)
    daemon = Daemon(providers, **options)
    path = tmp_path / "bbridge.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_socket, daemon, path)
        try:
            yield daemon, path
        finally:
            daemon.request_shutdown()
            with trio.fail_after(20):
                await daemon.stopped.wait()


def make_or_skip(target: str, what: str) -> None:
    """`make -s TARGET` (agents installed from a package registry); skip only when npm's registry is unreachable."""
    if shutil.which("make") is None or shutil.which("npm") is None:
        pytest.skip(f"make or npm is not installed, so {what} cannot be installed")
    made = subprocess.run(["make", "-s", target], cwd=REPO, capture_output=True, text=True, timeout=600)
    if made.returncode != 0:
        ping = subprocess.run(["npm", "ping"], capture_output=True, text=True, timeout=60)
        if ping.returncode != 0:
            pytest.skip(f"the npm registry is unreachable ({ping.stderr.strip()[-200:]}); {what} not installed")
        pytest.fail(f"make {target} failed:\n{made.stdout}\n{made.stderr}")


# -- a scripted HTTP endpoint on loopback ------------------------------------------


@dataclass
class HttpEndpoint:
    """A GET endpoint (e.g. a usage API): answers the queued replies in turn (the last one repeats), keeping each
    request's headers (lower-cased, plus `path`)."""

    url: str
    replies: list[tuple[int, dict[str, str], bytes]] = field(default_factory=list)
    requests: list[dict[str, str]] = field(default_factory=list)

    def reply(self, status: int, body: Any = None, **headers: str) -> None:
        """Queue an answer; a header value with newlines is sent once per line, `_` in a name reads `-`."""
        self.replies.append((status, headers, body if isinstance(body, bytes) else json.dumps(body).encode()))


@contextmanager
def loopback_http(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server of `handler` on 127.0.0.1 (a free port): its base URL; stopped after the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def http_endpoint(path: str) -> Iterator[HttpEndpoint]:
    state = HttpEndpoint("")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append({k.lower(): v for k, v in self.headers.items()} | {"path": self.path})
            status, headers, body = state.replies[0] if len(state.replies) == 1 else state.replies.pop(0)
            self.send_response(status)
            for name, value in headers.items():
                for one in value.split("\n"):
                    self.send_header(name.replace("_", "-"), one)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with loopback_http(Handler) as url:
        state.url = url + path
        yield state
