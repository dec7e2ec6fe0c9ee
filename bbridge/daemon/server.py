"""Client transports: the daemon on stdio or on a Unix socket (daemon.md §1).

Each client's lines go out at once while its socket takes them (`rpc.Connection.write_now`); otherwise they join
a bounded outbound queue drained by its own writer task, so a slow client never blocks a bridge: when the queue
is full the client is disconnected with a logged reason and catches up from the journal later.
"""

from __future__ import annotations

import errno
import hmac
import itertools
import os
import secrets
import signal
import socket as stdlib_socket
import stat
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import structlog
import trio

from bbridge.config_file import ConfigError
from bbridge.daemon.runtime import Daemon
from bbridge.wire import errors, rpc
from bbridge.wire.framing import MAX_LINE_BYTES

log = structlog.get_logger("bbridge.daemon.server")

# A client's unsent backlog, in bytes, before it is disconnected (it catches up from the journal). Bytes, not lines:
# 1,000 threads streaming make ~13,000 lines a second, so a line bound small enough to bound memory drops a client
# that pauses for half a second; 64 MiB is seconds of that, and bounds memory whatever the lines hold.
DEFAULT_QUEUE_BYTES = 64 << 20
FINAL_FLUSH_S = 0.1  # lets the answer to `shutdown` reach its client before connections close
CLOSE_FLUSH_S = 5.0  # a client that half-closed gets what is queued for it (its answers among it) within this long


class ClientConnection:
    """One connected client, on any transport: `transport` names it (`stdio`, `socket`, `ws`) for the metrics, and
    `authorized` says it proved the token before its first message (a WebSocket upgrade's bearer token). A client
    that must still prove the token joins the clients (events, inputs, relayed requests) only when its
    `initialize` carries it: nothing of the daemon reaches a connection before."""

    def __init__(
        self,
        daemon: Daemon,
        send: trio.abc.SendStream,
        receive: trio.abc.ReceiveStream,
        name: str,
        queue_bytes: int,
        *,
        transport: str = "socket",
        authorized: bool = False,
        max_line: int = MAX_LINE_BYTES,
    ) -> None:
        self.daemon = daemon
        self.name = name
        self.transport = transport
        self.authorized = daemon.token is None or authorized  # initialize needs no token then
        self.initialized = self.authorized
        self._send_stream = send
        self.conn = rpc.Connection(
            send,
            receive,
            name=name,
            on_request=self._on_request,
            on_junk=self._on_junk,
            answer_junk=True,
            respond=self._respond,
            fileno=_fileno(send),
            wake_writer=self._wake_writer,
            max_line=max_line,
        )
        self._queue_bytes = queue_bytes
        self._outbox_bytes = 0  # the unsent lines' size
        self._outbox: list[bytes] = []  # lines the writer has not taken yet
        self._outbox_closed = False
        self._outbox_ready = trio.Event()  # set when the outbox has lines or was closed
        self._nursery: trio.Nursery | None = None
        self._log = log.bind(client=name)

    async def relay(self, method: str, params: dict[str, Any]) -> msgspec.Raw:
        return await self.conn.request_raw(method, params, timeout=None)

    def enqueue(self, lines: list[bytes]) -> None:
        if self._outbox_closed:
            return
        outbox = self._outbox
        size = sum(map(len, lines))
        if self._outbox_bytes + size > self._queue_bytes:
            self.daemon.counters.clients_disconnected_slow += 1
            self._log.warning("disconnecting a client that stopped reading", reason="outbound queue full")
            self._disconnect()
            return
        if not outbox:
            if self.conn.write_now(lines):  # the writer is idle: sent now, without waking it (unless a rest is left)
                return
            self._outbox_ready.set()
        outbox.extend(lines)
        self._outbox_bytes += size

    def _wake_writer(self) -> None:
        """A direct write left the writer work: a rest to send, or a peer that stopped reading to close."""
        self._outbox_ready.set()

    def _respond(self, answer: bytes) -> None:
        """A request's answer joins the outbox: the writer sends it with the events queued before it, in one write.
        Written apart, a client with many requests in flight had its events wait behind each answer's own write."""
        self.enqueue([answer])

    def _close_outbox(self) -> None:
        self._outbox_closed = True
        self._outbox_ready.set()

    def _disconnect(self) -> None:
        self.daemon.remove_client(self)
        self._close_outbox()
        if self._nursery is not None:
            self._nursery.start_soon(self.conn.aclose)  # unblocks a writer stuck on a full socket

    async def run(self) -> None:
        if self.initialized:  # no token to prove (none set, or a WebSocket upgrade's bearer): it hears all at once
            self.daemon.add_client(self)
        self._log.info("client connected")
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer)
                await self.conn.run(drain=True)  # a client that half-closes still gets its answers
                self.daemon.remove_client(self)  # nothing new is sent or relayed to it: what is queued still goes
                self._close_outbox()  # out (its answers among it), then the writer closes the connection
                nursery.cancel_scope.deadline = trio.current_time() + CLOSE_FLUSH_S
        finally:
            self._nursery = None
            self.daemon.remove_client(self)
            self._close_outbox()
            self._log.info("client disconnected")

    async def _writer(self) -> None:
        """One write per wake-up: everything queued (after what a direct write left) goes out in a single send."""
        try:
            while True:
                await self._outbox_ready.wait()
                self._outbox_ready = trio.Event()
                batch, self._outbox, self._outbox_bytes = self._outbox, [], 0
                await self.conn.send_lines(batch)  # after what `write_now` left unsent
                del batch  # freed now, while in the cache, not after the next wait (`rpc.Connection._read_loop`)
                if self.conn.write_closed:
                    return
                if self._outbox_closed and not self._outbox:
                    break
        finally:
            self._outbox_closed = True
        # the queue was closed (the client fell behind, or its reading side ended and all is sent): close
        await self.conn.aclose()

    def _on_junk(self, line: bytes, reason: str) -> None:
        self._log.warning("unreadable client message", reason=reason, line=line[:200].decode("utf-8", errors="replace"))

    async def _on_request(self, request: rpc.Request) -> Any:
        params: Any = {} if request.params is None else msgspec.json.decode(request.params)
        if not isinstance(params, dict):
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"Invalid params for {request.method}: expected an object")
        if request.method == "initialize":
            if not self.authorized and not token_matches(params.get("token"), self.daemon.token or ""):
                self._log.warning("client refused: bad or missing token")
                trio.lowlevel.spawn_system_task(self._close_soon)
                raise rpc.RpcError(errors.UNAUTHORIZED, "initialize needs the daemon's token (see --token-file)")
            if not self.initialized and not self._outbox_closed:
                self.daemon.add_client(self)  # only now does it hear events, inputs and relayed requests
            self.initialized = True
        elif not self.initialized:
            raise rpc.RpcError(errors.UNAUTHORIZED, "send initialize with the daemon's token first")
        return await self.daemon.handle(self, request.method, params)

    async def _close_soon(self) -> None:
        await trio.sleep(0.05)
        await self.conn.aclose()


def token_matches(given: object, token: str) -> bool:
    """Whether a client's token is the daemon's, compared in constant time (the token is never logged)."""
    return isinstance(given, str) and hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


def _fileno(stream: trio.abc.SendStream) -> Callable[[], int] | None:
    """The descriptor behind a socket or pipe stream, for `rpc.Connection.write_now`: None for any other stream."""
    if isinstance(stream, trio.SocketStream):
        return stream.socket.fileno
    if isinstance(stream, trio.lowlevel.FdStream):
        return stream.fileno
    return None


async def _watch_signals(daemon: Daemon) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("signal received; shutting down", signal=signal.Signals(signum).name)
            daemon.request_shutdown()
            return


async def serve_stdio(daemon: Daemon, faces: Sequence[Face] = (), queue_bytes: int = DEFAULT_QUEUE_BYTES) -> None:
    """The daemon with its client on stdio (the process that spawned it) and `faces` in process (a room's)."""
    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    client = ClientConnection(daemon, stdout, stdin, "stdio", queue_bytes, transport="stdio")
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        nursery.start_soon(_watch_signals, daemon)
        for face in faces:
            await nursery.start(face, daemon, queue_bytes)

        async def client_then_stop() -> None:
            await client.run()
            daemon.request_shutdown()  # the spawning process went away

        nursery.start_soon(client_then_stop)
        await daemon.stopped.wait()
        await trio.sleep(FINAL_FLUSH_S)
        nursery.cancel_scope.cancel()


def read_or_make_token(path: Path) -> str:
    """The token in `path`; when there is no such file, a new random one written there (mode 0600, never logged),
    and a warning saying where, so an operator can hand the file to clients."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        token = path.read_text(encoding="utf-8").strip()
        if not token:
            raise ConfigError(f"the token file {path} is empty (delete it and serve makes one)") from None
        return token
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(token + "\n")
    log.warning("made a new token file (mode 0600): clients pass --token-file with it", path=str(path))
    return token


def _prepare_socket_path(path: Path) -> None:
    """Create the directory (0700) or replace a stale socket nobody answers on."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    if not path.exists():
        return
    if not stat.S_ISSOCK(path.stat().st_mode):
        raise OSError(errno.EEXIST, f"{path} exists and is not a socket")
    probe = stdlib_socket.socket(stdlib_socket.AF_UNIX, stdlib_socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()  # stale: nothing answers
        return
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"another daemon is listening on {path}")


async def open_socket_listener(path: Path) -> trio.SocketListener:
    _prepare_socket_path(path)
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        await sock.bind(str(path))
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    sock.listen(128)
    return trio.SocketListener(sock)


# A face serves clients (socket, listener) until cancelled; it reports started once it accepts connections.
Face = Callable[[Daemon, int, trio.TaskStatus[None]], Awaitable[None]]


async def serve(
    daemon: Daemon,
    faces: Sequence[Face],
    queue_bytes: int = DEFAULT_QUEUE_BYTES,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The daemon with every face it was given, until it is asked to stop (`shutdown`, SIGTERM, SIGINT)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        nursery.start_soon(_watch_signals, daemon)
        for face in faces:
            await nursery.start(face, daemon, queue_bytes)
        task_status.started()
        await daemon.stopped.wait()
        await trio.sleep(FINAL_FLUSH_S)
        nursery.cancel_scope.cancel()


def socket_face(path: Path) -> Face:
    """The Unix-socket face: one `ClientConnection` per connection."""

    async def face(daemon: Daemon, queue_bytes: int, task_status: trio.TaskStatus[None]) -> None:
        listener = await open_socket_listener(path)
        counter = itertools.count(1)

        async def handle(stream: trio.SocketStream) -> None:
            await ClientConnection(daemon, stream, stream, f"socket-{next(counter)}", queue_bytes).run()

        try:
            log.info("listening", socket=str(path))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.serve_listeners, handle, [listener])
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                await listener.aclose()
            path.unlink(missing_ok=True)

    return face


async def serve_socket(
    daemon: Daemon,
    path: Path,
    queue_bytes: int = DEFAULT_QUEUE_BYTES,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The daemon on a Unix socket alone."""
    await serve(daemon, [socket_face(path)], queue_bytes, task_status=task_status)
