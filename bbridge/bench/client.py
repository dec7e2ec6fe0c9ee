"""The daemon benchmark's socket client (stdlib only, blocking, kept cheap so it is never the bottleneck).

Usage: python -m bbridge.bench.client SOCKET PROMPT [PROMPT...]

Starts a thread on the `bench` provider, then runs one turn per PROMPT (see
`bbridge.bench.fake_bridge`) and reads until that phase's done marker. Incoming
bytes are scanned whole, never decoded per event: `{"seq":` counts events
(inside JSON strings a quote is always escaped) and `@<ns>@` probe stamps give
latencies against the receipt time on the same monotonic clock. Prints one JSON
object with a record per phase.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import time
from typing import Any

from bbridge.bench.stream import DONE_PREFIX

THREAD = "bench-client"
_STAMP = re.compile(rb'"delta":"@(\d+)@"')
_DONE = re.compile(re.escape(DONE_PREFIX.encode()) + rb'(\w+):(\d+):(\d+)"')
_RESPONSE = re.compile(rb'^\{"jsonrpc":"2\.0","id":(\d+),.*$', re.M)


class Client:
    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.carry = b""
        self.next_id = 0
        self.answered: dict[int, Any] = {}
        self.events = 0
        self.latencies_ns: list[int] = []
        self.done: dict[str, Any] | None = None

    def request(self, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.sock.sendall(json.dumps(message).encode() + b"\n")
        while self.next_id not in self.answered:
            self.receive()
        answer = self.answered.pop(self.next_id)
        if "error" in answer:
            raise RuntimeError(f"{method} failed: {answer['error']}")
        return answer["result"]

    def receive(self) -> None:
        data = self.sock.recv(1 << 20)
        now = time.monotonic_ns()
        if not data:
            raise RuntimeError("the daemon closed the connection")
        cut = data.rfind(b"\n")
        if cut < 0:
            self.carry += data
            return
        lines, self.carry = self.carry + data[: cut + 1], data[cut + 1 :]
        self.events += lines.count(b'{"seq":')
        self.latencies_ns.extend(now - int(stamp) for stamp in _STAMP.findall(lines))
        for match in _RESPONSE.finditer(lines):
            self.answered[int(match[1])] = json.loads(match[0])
        done = _DONE.search(lines)
        if done is not None:
            self.done = {"phase": done[1].decode(), "deltas": int(done[2]), "started_ns": int(done[3]), "done_ns": now}

    def phase(self, prompt: str) -> dict[str, Any]:
        self.events, self.latencies_ns, self.done = 0, [], None
        params = {"threadId": THREAD, "clientRequestId": "creq_bench00000", "input": [{"type": "text", "text": prompt}]}
        self.request("turn/start", params)
        while self.done is None:
            self.receive()
        return {**self.done, "events": self.events, "latencies_ns": self.latencies_ns}


def main() -> None:
    client = Client(sys.argv[1])
    client.request("initialize", {"client": {"name": "bbridge-bench", "version": "0"}})
    client.request("thread/start", {"providerId": "bench", "threadId": THREAD})
    phases = [client.phase(prompt) for prompt in sys.argv[2:]]
    print(json.dumps({"phases": phases}))


if __name__ == "__main__":
    main()
