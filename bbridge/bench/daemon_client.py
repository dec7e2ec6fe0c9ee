"""The daemon benchmark's socket client (blocking, kept cheap so it is never the bottleneck).

Usage: python -m bbridge.bench.daemon_client SOCKET PROMPT [PROMPT...]

Starts a thread on the `bench` provider, then runs one turn per PROMPT (see
`bbridge.bench.fake_bridge`) and reads until that phase's done marker. Events
are never decoded: the only `@` bytes in the stream surround the probe stamps
(`@<monotonic ns>@`, compared with the receipt time on the same clock) and the
done marker, so one `memchr` scan per read finds them all. Prints one JSON
object with a record per phase.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from bbridge.bench.stream import DONE, MARK
from bbridge.wire.websocket import ClientHandshake, MessageLines

THREAD = "bench-client"
_MARK = MARK.encode()
_DONE = DONE.encode() + b":"


def complete_lines(carry: bytes, data: bytes) -> tuple[bytes | None, bytes]:
    """The complete lines a read finishes (None: not one yet) and the partial line carried to the next read."""
    cut = data.rfind(b"\n")
    if cut < 0:
        return None, carry + data
    complete = data if cut + 1 == len(data) else data[: cut + 1]  # no copy in the usual case
    return (carry + complete if carry else complete), data[cut + 1 :]


class SocketClient:
    """A blocking JSON-RPC client on the daemon's socket, or on a `ws://HOST:PORT/rpc` listener (its frames turned
    into the same lines by `MessageLines`): numbered requests out, each read cut at its last line end (the daemon
    and scale clients read what they need from the lines themselves). `token` goes in the upgrade's bearer header."""

    def __init__(self, target: str, token: str | None = None) -> None:
        self.carry = b""
        self.next_id = 0
        self.ws: MessageLines | None = None
        if target.startswith("ws://"):
            self.sock, self.ws = _open_websocket(target, token)
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(target)

    def send(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        message = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}).encode()
        self.sock.sendall(message + b"\n" if self.ws is None else self.ws.frame(message))
        return self.next_id

    def read(self) -> tuple[bytes | None, int]:
        """The complete lines one read finishes (None: not one yet) and when it arrived (monotonic ns)."""
        data = self.sock.recv(1 << 20)
        now = time.monotonic_ns()
        if not data:
            raise RuntimeError("the daemon closed the connection")
        if self.ws is not None:
            got = self.ws.receive(data)
            if got.reply:
                self.sock.sendall(got.reply)  # pongs to the keepalive's pings
            if got.closed:
                raise RuntimeError(f"the daemon closed the WebSocket: {got.close_reason}")
            data = got.lines
        lines, self.carry = complete_lines(self.carry, data)
        return lines, now


def _open_websocket(url: str, token: str | None) -> tuple[socket.socket, MessageLines]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # pipelined small requests must not wait for Nagle
    headers = [("Authorization", f"Bearer {token}")] if token else []
    handshake = ClientHandshake(f"{host}:{port}", parts.path or "/rpc", headers)
    sock.sendall(handshake.request)
    while (lines := handshake.feed(sock.recv(1 << 16) or None)) is None:
        pass
    return sock, lines


class BenchClient(SocketClient):
    """The daemon benchmark's client: its setup requests answered, then each phase's turn read until the done marker,
    with every probe stamp's latency (receipt minus stamp) and the phase's record."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.awaiting: bytes | None = None  # the head of the response `request` waits for
        self.answer: Any = None
        self.latencies_ns: list[int] = []
        self.done: dict[str, Any] | None = None

    def request(self, method: str, params: dict[str, Any]) -> Any:
        request_id = self.send(method, params)
        self.awaiting, self.answer = b'{"jsonrpc":"2.0","id":%d,' % request_id, None
        while self.answer is None:
            self.receive()
        self.awaiting = None
        if "error" in self.answer:
            raise RuntimeError(f"{method} failed: {self.answer['error']}")
        return self.answer["result"]

    def receive(self) -> None:
        lines, now = self.read()
        if lines is None:
            return
        if self.awaiting is not None and (start := lines.find(self.awaiting)) >= 0:
            self.answer = json.loads(lines[start : lines.index(b"\n", start)])
        start = lines.find(_MARK)
        while start >= 0:
            end = lines.index(_MARK, start + 1)
            token = lines[start + 1 : end]
            if token.startswith(_DONE):
                phase, deltas, started, late = token[len(_DONE) :].decode().split(":")
                self.done = {
                    "phase": phase,
                    "deltas": int(deltas),
                    "started_ns": int(started),
                    "done_ns": now,
                    "bridge_late_wakes": int(late),
                }
            else:
                self.latencies_ns.append(now - int(token))
            start = lines.find(_MARK, end + 1)

    def phase(self, prompt: str) -> dict[str, Any]:
        params = {"threadId": THREAD, "clientRequestId": "creq_bench00000", "input": [{"type": "text", "text": prompt}]}
        self.request("turn/start", params)
        while self.done is None:
            self.receive()
        record = {**self.done, "latencies_ns": self.latencies_ns}
        self.latencies_ns, self.done = [], None
        return record


def main() -> None:
    client = BenchClient(sys.argv[1])
    client.request("initialize", {"client": {"name": "bbridge-bench", "version": "0"}})
    client.request("thread/start", {"providerId": "bench", "threadId": THREAD})
    phases = [client.phase(prompt) for prompt in sys.argv[2:]]
    print(json.dumps({"phases": phases}))


if __name__ == "__main__":
    main()
