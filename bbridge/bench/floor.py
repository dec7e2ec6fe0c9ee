"""The scale phase's floor: a minimal trio relay moving the bridges' lines to the clients, with nothing in between.

Usage: python -m bbridge.bench.floor BRIDGES (--socket PATH | --port PORT)

It starts BRIDGES `bbridge.bench.scale_bridge` processes (providers `scale0..`) as the daemon does, and serves the
scale clients on a Unix socket or on `ws://127.0.0.1:PORT/rpc` (the listener's own sans-IO WebSocket,
`wire.websocket.MessageLines`, after an h11 head read by `listen.http`). What it does per bridge read is all a
relay must: wait until the pipe is readable, one `read`, cut at the last line end, and write the complete lines to
every client (each line its own text frame over WebSocket, by `MessageLines.frames` as the listener frames
them): one non-blocking `write` on the client's descriptor when nothing is queued for it, else a queue its writer
task drains, as the daemon's clients write. The lines are the bridges' `thread/delta` notifications as they are:
no decoding, no validation, no assembly, no journal, no coalescing. The bridges' answers (to the `turn/start`
requests it forwards) are dropped.

Client requests (setup only, never on the streaming path) are decoded and answered here: `initialize`, a
`thread/start` (which bridge the thread is on), `turn/start` (forwarded to that bridge), `daemon/status` (the lines
forwarded, as `deltas_in`), and `{}` to anything else.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from bbridge.bench.daemon_client import complete_lines
from bbridge.daemon.server import open_socket_listener
from bbridge.listen.http import Exchange
from bbridge.wire.websocket import MessageLines

READ_BYTES = 1 << 16


class Peer:
    """One client: lines out as one direct write while nothing is queued, else through its writer task."""

    def __init__(self, stream: trio.SocketStream, ws: MessageLines | None) -> None:
        self.stream = stream
        self.ws = ws
        self.fd = stream.socket.fileno()
        self.pending = bytearray()
        self.writing = False
        self.closed = False
        self.wake = trio.Event()

    def send_lines(self, lines: bytes) -> None:
        self.send_raw(lines if self.ws is None else self.ws.frames(lines))

    def send_raw(self, data: bytes) -> None:
        if self.closed or not data:
            return
        if not self.pending and not self.writing:
            try:
                sent = os.write(self.fd, data)
            except BlockingIOError:
                sent = 0
            except OSError:
                self.closed = True
                return
            if sent == len(data):
                return
            data = data[sent:]
            self.wake.set()
        self.pending += data

    async def writer(self) -> None:
        while not self.closed:
            await self.wake.wait()
            self.wake = trio.Event()
            data, self.pending = bytes(self.pending), bytearray()
            self.writing = True
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.closed = True
            finally:
                self.writing = False
            if self.pending:
                self.wake.set()


class Floor:
    def __init__(self, bridges: int) -> None:
        self.bridges = bridges
        self.processes: list[trio.Process] = []
        self.locks = [trio.Lock() for _ in range(bridges)]
        self.peers: list[Peer] = []
        self.thread_bridge: dict[str, int] = {}
        self.lines_in = 0
        self.next_id = 0

    async def run(self, nursery: trio.Nursery) -> None:
        command = [sys.executable, "-m", "bbridge.bench.scale_bridge"]
        for _ in range(self.bridges):
            process = await trio.lowlevel.open_process(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self.processes.append(process)
            nursery.start_soon(self.relay, process)

    async def relay(self, process: trio.Process) -> None:
        """One bridge's stdout to every client, a read at a time, cut at its last line end."""
        assert process.stdout is not None
        fd = process.stdout.fileno()  # type: ignore[attr-defined]
        carry = b""
        while True:
            await trio.lowlevel.wait_readable(fd)
            try:
                data = os.read(fd, READ_BYTES)
            except BlockingIOError:
                continue
            if not data:
                return
            lines, carry = complete_lines(carry, data)
            if lines is None:
                continue
            if b'"id"' in lines:  # a bridge's answer to a forwarded turn/start: not the clients'
                lines = b"".join(line for line in lines.splitlines(keepends=True) if b'"id"' not in line)
            self.lines_in += lines.count(b"\n")
            for peer in self.peers:
                peer.send_lines(lines)

    async def serve_client(self, stream: trio.SocketStream, ws: MessageLines | None, rest: bytes) -> None:
        peer = Peer(stream, ws)
        self.peers.append(peer)
        carry = b""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(peer.writer)
                pending = rest  # what the head's read took past the upgrade request
                while True:
                    data, pending = pending or await _receive(stream), b""
                    if ws is not None:
                        got = ws.receive(data or None)
                        peer.send_raw(got.reply)
                        if got.closed:
                            break
                        data = got.lines
                    elif not data:
                        break
                    *lines, carry = (carry + data).split(b"\n")
                    for line in lines:
                        if line.strip():
                            await self.answer(peer, json.loads(line))
                nursery.cancel_scope.cancel()
        finally:
            self.peers.remove(peer)
            await trio.aclose_forcefully(stream)

    async def answer(self, peer: Peer, request: dict[str, Any]) -> None:
        method, params = request.get("method"), request.get("params") or {}
        result: Any = {}
        if method == "thread/start":
            self.thread_bridge[params["threadId"]] = int(str(params["providerId"]).removeprefix("scale"))
            result = {"threadId": params["threadId"]}
        elif method == "turn/start":
            bridge = self.thread_bridge[params["threadId"]]
            self.next_id += 1
            line = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}) + "\n"
            stdin = self.processes[bridge].stdin
            assert stdin is not None
            async with self.locks[bridge]:
                await stdin.send_all(line.encode())
        elif method == "daemon/status":
            result = {"counters": {"deltas_in": self.lines_in, "clients_disconnected_slow": 0, "grammar_drops": 0}}
        if "id" in request:
            peer.send_lines(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode() + b"\n")


async def _receive(stream: trio.SocketStream) -> bytes:
    """What the client sent next; empty at its end."""
    try:
        return bytes(await stream.receive_some(READ_BYTES))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return b""


async def _main(bridges: int, socket: Path | None, port: int | None) -> None:
    floor = Floor(bridges)
    async with trio.open_nursery() as nursery:
        await floor.run(nursery)
        if socket is not None:
            listeners: list[trio.SocketListener] = [await open_socket_listener(socket)]

            async def handle(stream: trio.SocketStream) -> None:
                await floor.serve_client(stream, None, b"")

        else:
            listeners = await trio.open_tcp_listeners(port or 0, host="127.0.0.1")

            async def handle(stream: trio.SocketStream) -> None:
                try:
                    head = await Exchange().read_head(stream)
                except EOFError:  # a readiness probe
                    await trio.aclose_forcefully(stream)
                    return
                lines, accepted = MessageLines.server(head.headers, head.target)
                await stream.send_all(accepted)
                await floor.serve_client(stream, lines, head.rest)

        nursery.start_soon(trio.serve_listeners, handle, listeners)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        for process in floor.processes:  # a bridge ends at its stdin's end
            assert process.stdin is not None
            await process.stdin.aclose()
            await process.wait()
        nursery.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bbridge.bench.floor")
    parser.add_argument("bridges", type=int)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", type=Path)
    where.add_argument("--port", type=int)
    args = parser.parse_args()
    trio.run(_main, args.bridges, args.socket, args.port)


if __name__ == "__main__":
    main()
