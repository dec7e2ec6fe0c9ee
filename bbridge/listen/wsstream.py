"""A WebSocket connection as the byte stream a daemon `Client` reads lines from and writes lines to.

The client's `rpc.Connection` reads and writes newline-delimited JSON-RPC exactly as on a Unix socket; this stream
turns each text message into one line and each written line into one text frame (`wire.websocket.MessageLines`),
so the socket's answers, bounds and slow-reader handling (the client's outbox bound) hold unchanged. The replies a
read calls for (pongs, a close's answer, a refused binary message) and the keepalive's pings share one send lock
with the client's writes. `keepalive` pings the peer and closes the connection when nothing is heard for a ping's
interval plus its timeout: a peer gone without a close (a dropped link) is found.

Lines go out as the daemon writes to a Unix-socket client: `write_nowait` (for `rpc.Connection.write_now`, in the
daemon's broadcast itself) frames them and writes them with one non-blocking `write` on the socket's descriptor
when nothing else is being written, keeping what the socket did not take for the next write; a write through
`send_all` (the client's writer task, pongs, pings) also tries the descriptor first, and only what the socket did
not take goes through trio's `send_all`, which passes through the scheduler before and after its system call.
"""

from __future__ import annotations

import os

import structlog
import trio

from bbridge.wire.websocket import MessageLines

log = structlog.get_logger("bbridge.listen")

READ_BYTES = 65536
CLOSE_S = 1.0  # how long a close frame may take before the transport is closed anyway


class WebSocketStream(trio.abc.HalfCloseableStream):
    def __init__(self, transport: trio.abc.Stream, lines: MessageLines, rest: bytes, name: str) -> None:
        self._transport = transport
        self._lines = lines
        self._rest = rest  # what was read past the upgrade request
        self._send_lock = trio.Lock()
        # the descriptor, asked at each write (-1 once closed, never a number reused since); None over TLS
        self._fileno = transport.socket.fileno if isinstance(transport, trio.SocketStream) else None
        self._backlog = b""  # frames a `write_nowait` could not write: the next write sends them first
        self._log = log.bind(client=name)
        self.heard = trio.current_time()  # the last time anything arrived from the peer

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while True:
            if self._rest:
                data: bytes | None = self._rest
                self._rest = b""
            else:
                try:
                    data = bytes(await self._transport.receive_some(READ_BYTES)) or None
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = None
            if data is not None:
                self.heard = trio.current_time()
            got = self._lines.receive(data)
            for reason in got.refused:
                self._log.warning("unreadable client message", reason=reason)
            if got.reply:
                await self._write(got.reply)
            if got.lines:
                return got.lines
            if got.closed or data is None:
                return b""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._write(self._lines.frames(bytes(data)))

    @property
    def backlog(self) -> bool:
        return bool(self._backlog)

    def write_nowait(self, data: bytes) -> bool:
        """`data`'s lines as frames, written now when the send lock is free and the socket has a descriptor (what
        it does not take waits in the backlog): False, writing nothing, otherwise."""
        fd = -1 if self._fileno is None or self._backlog or self._send_lock.locked() else self._fileno()
        if fd < 0:
            return False
        self._backlog = _write_some(fd, self._lines.frames(data))
        return True

    async def wait_send_all_might_not_block(self) -> None:
        await self._transport.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self._write(self._lines.close(1000))

    async def aclose(self) -> None:
        try:
            with trio.move_on_after(CLOSE_S):
                await self._write(self._lines.close(1000))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(self._transport)

    async def keepalive(self, interval_s: float, timeout_s: float) -> None:
        """Ping every `interval_s`; close when nothing was heard for `interval_s + timeout_s`."""
        while True:
            await trio.sleep(interval_s)
            if trio.current_time() - self.heard > interval_s + timeout_s:
                self._log.warning("closing a WebSocket client that stopped answering pings")
                await trio.aclose_forcefully(self._transport)
                return
            try:
                await self._write(self._lines.ping(b"bbridge"))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return

    async def _write(self, raw: bytes) -> None:
        if not raw and not self._backlog:
            return
        lock = self._send_lock
        try:
            lock.acquire_nowait()  # uncontended: no scheduler pass before the write
        except trio.WouldBlock:
            await lock.acquire()
        try:
            if self._backlog:
                raw, self._backlog = self._backlog + raw, b""
            fd = -1 if self._fileno is None else self._fileno()
            if fd >= 0:
                raw = _write_some(fd, raw)
            if raw:
                await self._transport.send_all(raw)
        finally:
            lock.release()


def _write_some(fd: int, raw: bytes) -> bytes:
    """One non-blocking `write` of `raw` on the socket's descriptor: what it did not take."""
    try:
        return raw[os.write(fd, raw) :]
    except BlockingIOError:
        return raw
    except OSError as exc:
        raise trio.BrokenResourceError(f"the WebSocket peer stopped reading: {exc}") from exc
