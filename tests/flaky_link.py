"""A loopback TCP proxy whose links drop: `cut()` resets every connection through it at once, mid-frame or not,
as a dropped Wi-Fi link or a NAT that forgot the flow would (the peers see a reset, not a close)."""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import trio


class FlakyLink:
    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._links: set[trio.CancelScope] = set()
        self._streams: list[trio.SocketStream] = []
        self.port = 0
        self.dropped: list[int] = []  # per cut, the connections it dropped

    @property
    def open_links(self) -> int:
        return len(self._links)

    async def wait_for_links(self, count: int) -> None:
        """Until `count` connections are open through the link (the clients have reconnected)."""
        with trio.fail_after(10):
            while len(self._links) < count:
                await trio.sleep(0.005)

    def cut(self) -> int:
        """Reset every open connection; how many there were."""
        open_links = len(self._links)
        for stream in self._streams:
            _reset(stream)
        for scope in self._links:
            scope.cancel()
        self._links.clear()  # cut now, though their tasks end a moment later
        self._streams.clear()
        self.dropped.append(open_links)
        return open_links

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._carry, listeners)

    async def _carry(self, near: trio.SocketStream) -> None:
        try:
            far = await trio.open_tcp_stream("127.0.0.1", self._target)
        except OSError:
            await near.aclose()
            return
        with trio.CancelScope() as scope:
            self._links.add(scope)
            self._streams += [near, far]
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_pump, near, far, nursery.cancel_scope)
                    nursery.start_soon(_pump, far, near, nursery.cancel_scope)
            finally:
                self._links.discard(scope)
        for stream in (near, far):
            await trio.aclose_forcefully(stream)


async def _pump(source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope) -> None:
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    done.cancel()


def _reset(stream: trio.SocketStream) -> None:
    """Close with RST (SO_LINGER 0): the peer's next read or write fails, as on a dropped link."""
    with suppress(OSError):
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@asynccontextmanager
async def flaky_link(target_port: int) -> AsyncIterator[FlakyLink]:
    link = FlakyLink(target_port)
    async with trio.open_nursery() as nursery:
        await nursery.start(link.serve)
        yield link
        nursery.cancel_scope.cancel()
