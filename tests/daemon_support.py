"""A daemon on a temporary Unix socket and a test client that records what it is sent."""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import trio

from bbridge import rpc
from bbridge.config import ProviderConfig
from bbridge.daemon import Daemon
from bbridge.server import serve_socket

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
        return self._answer(request)

    def events(self, thread_id: str) -> list[dict[str, Any]]:
        return [entry["event"] for entry in self.entries[thread_id]]

    def types(self, thread_id: str) -> list[str]:
        return [event["type"] for event in self.events(thread_id)]

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
