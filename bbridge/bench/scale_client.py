"""The scale benchmark's clients (blocking, one process each): they check every event and read the latencies.

Usage: python -m bbridge.bench.scale_client watch|drive TARGET TOKEN_FILE check|count THREADS TIMEOUT_S BRIDGES
       SECONDS RATE

TARGET is the daemon's Unix socket or a `ws://HOST:PORT/rpc` URL (the token also goes in the upgrade's bearer
header). Both roles print `ready` once initialized. `check` (the daemon) checks each thread's events: every `seq`
once and in order from 1 (a gap, a repeat or a step back is counted), until every thread's turn has completed, then
asks the journal (`thread/events {afterSeq}`) whether anything came after the last seq seen. `count` (the floor
relay, `bbridge.bench.floor`, which forwards the bridges' `thread/delta` lines as they are and has no journal) counts
those lines and the turns' boundaries: a line short of every thread's turn is lost, one over it duplicated. `drive`
also starts the threads (`scale-<n>` on providers `scale0..scale<BRIDGES-1>`, round robin) and their turns
(`scale SECONDS RATE`), printing `turning` before the first turn/start and `turns` once every one is answered,
and reads `daemon/status` counters at the end. First-delta latency: the bridge stamps the first delta of each text stream with `@<ns>.<pid>.<n>@` (its
send time); the first receipt of each stamp is a sample. One JSON object on stdout at the end.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import msgspec

from bbridge.bench.daemon_client import SocketClient
from bbridge.bench.scale_bridge import turn_plan


class _Event(msgspec.Struct):
    type: str


class _Entry(msgspec.Struct):
    seq: int
    event: _Event


class _Params(msgspec.Struct):
    threadId: str | None = None
    events: list[_Entry] = []


class _Message(msgspec.Struct):
    method: str | None = None
    id: int | None = None
    params: _Params | None = None
    result: Any = None
    error: Any = None


_decode = msgspec.json.Decoder(_Message).decode
WINDOW = 256  # requests in flight at once


class Checker(SocketClient):
    def __init__(self, target: str, token: str | None, threads: int) -> None:
        super().__init__(target, token)
        self.threads = threads
        self.answers: dict[int, _Message] = {}
        self.unanswered: set[int] = set()
        self.last: dict[str, int] = {}
        self.completed: set[str] = set()
        self.events = 0
        self.gaps = self.duplicates = 0
        self.stamps: set[bytes] = set()
        self.latencies_ns: list[int] = []
        self.received_ns: list[int] = []  # when each latency sample arrived

    def send_many(self, requests: list[tuple[str, dict[str, Any]]]) -> list[int]:
        """Pipelined, at most `WINDOW` unanswered at a time; the events that arrive meanwhile are checked."""
        ids = []
        for method, params in requests:
            ids.append(self.send(method, params))
            self.unanswered.add(ids[-1])
            while len(self.unanswered) >= WINDOW:
                self.receive()
        while self.unanswered:
            self.receive()
        for i in ids:
            if self.answers[i].error is not None:
                raise RuntimeError(f"request {i} failed: {self.answers[i].error}")
        return ids

    def receive(self) -> None:
        lines, now = self.read()
        if lines is not None:
            self.stamped(lines, now)
            for line in lines.split(b"\n"):
                if line:
                    self.take(_decode(line))

    def stamped(self, lines: bytes, now: int) -> None:
        """Each stamp's first receipt is a first-delta latency sample."""
        start = lines.find(b"@")
        while start >= 0:
            end = lines.index(b"@", start + 1)
            token = lines[start + 1 : end]
            if token not in self.stamps:
                self.stamps.add(token)
                self.latencies_ns.append(now - int(token.split(b".", 1)[0]))
                self.received_ns.append(now)
            start = lines.find(b"@", end + 1)

    def take(self, message: _Message) -> None:
        if message.method is None:
            if message.id is not None:
                self.answers[message.id] = message
                self.unanswered.discard(message.id)
            return
        if message.method != "thread/events" or message.params is None or message.params.threadId is None:
            return
        thread = message.params.threadId
        last = self.last.get(thread, 0)
        for entry in message.params.events:
            self.events += 1
            if entry.seq <= last:
                self.duplicates += 1
                continue
            self.gaps += entry.seq != last + 1
            last = entry.seq
            if entry.event.type == "turn/completed":
                self.completed.add(thread)
        self.last[thread] = last

    def wait_completed(self, deadline: float) -> None:
        while len(self.completed) < self.threads and time.monotonic() < deadline:
            self.receive()

    def tail_lost(self) -> int:
        """Events the journal holds after the last seq this client saw, over every thread."""
        threads = sorted(self.last)
        ids = self.send_many([("thread/events", {"threadId": t, "afterSeq": self.last[t]}) for t in threads])
        return sum(len(self.answers[i].result["events"]) for i in ids)

    def report(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "threads_seen": len(self.last),
            "threads_completed": len(self.completed),
            "gaps": self.gaps,
            "duplicates": self.duplicates,
            "latencies_ns": self.latencies_ns,
            "received_ns": self.received_ns,
        }


class Counter(Checker):
    """The floor's client: `thread/delta` lines and turn boundaries counted, never decoded (only answers are)."""

    def __init__(self, target: str, token: str | None, threads: int, per_thread: int) -> None:
        super().__init__(target, token, threads)
        self.expected = threads * per_thread
        self.boundaries = 0

    def receive(self) -> None:
        lines, now = self.read()
        if lines is None:
            return
        self.stamped(lines, now)
        self.events += lines.count(b'"thread/delta"')
        self.boundaries += lines.count(b'"turn.boundary"')
        if b'"id"' in lines:  # an answer among them (a delta line holds no `"id"` key)
            for line in lines.split(b"\n"):
                if b'"id"' in line and b'"thread/delta"' not in line:
                    self.take(_decode(line))

    def wait_completed(self, deadline: float) -> None:
        while self.boundaries < self.threads and time.monotonic() < deadline:
            self.receive()

    def tail_lost(self) -> int:
        return max(0, self.expected - self.events)

    def report(self) -> dict[str, Any]:
        return {
            **super().report(),
            "threads_seen": self.boundaries,
            "threads_completed": min(self.boundaries, self.threads),
            "duplicates": max(0, self.events - self.expected),
        }


def main() -> None:
    role, target, token_file, mode = sys.argv[1:5]
    threads, timeout, bridges, seconds, rate = int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]), *sys.argv[8:10]
    with open(token_file, encoding="utf-8") as f:
        token = f.read().strip()
    if mode == "count":
        checker: Checker = Counter(target, token, threads, len(turn_plan("x", float(seconds), float(rate))))
    else:
        checker = Checker(target, token, threads)
    hello = {"client": {"name": f"bbridge-scale-{role}", "version": "0"}, "token": token}
    checker.send_many([("initialize", hello)])
    print("ready", flush=True)
    result: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    if role == "drive":
        names = [f"scale-{n}" for n in range(threads)]
        checker.send_many(
            [("thread/start", {"providerId": f"scale{n % bridges}", "threadId": t}) for n, t in enumerate(names)]
        )
        print("turning", flush=True)
        started = time.monotonic_ns()
        text = [{"type": "text", "text": f"scale {seconds} {rate}"}]
        turn = {"clientRequestId": "creq_scale00000", "input": text}
        checker.send_many([("turn/start", {"threadId": t, **turn}) for t in names])
        print("turns", flush=True)
        result["turns_started_ns"] = started
    checker.wait_completed(deadline)
    result["done_ns"] = time.monotonic_ns()
    result["lost_at_tail"] = checker.tail_lost()
    if role == "drive":
        (status,) = checker.send_many([("daemon/status", {})])
        result["counters"] = checker.answers[status].result["counters"]
    print(json.dumps({**result, **checker.report()}), flush=True)


if __name__ == "__main__":
    main()
