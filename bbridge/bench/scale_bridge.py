"""The scale benchmark's bridge: many threads, each streaming one realistic turn at a model's pace (stdlib only).

`turn/start` whose first input text is `scale SECONDS RATE` schedules that thread's turn: after a random start
offset (under one second, so threads do not tick together), reasoning text, a tool call with progress, a command
with streamed output, the answer streamed token by token, usage and the boundary, one delta every `1/RATE`
seconds (RATE tokens per second), lasting about SECONDS. The first delta of each text stream (reasoning, command
output, answer) carries the bridge's send time (`@<monotonic ns>@`): the client reads the first-delta latency
from it. One loop writes every delta that is due, for every thread, in one write per tick.
"""

from __future__ import annotations

import math
import os
import random
import select
import sys
import time
from collections.abc import Callable
from typing import Any

from bbridge.bench import stream

TICK_S = 0.005  # the writer's granularity: a delta is written at most this late by design
STAMP = "~stamp~"  # replaced by `@<ns>@` when the line is written (no other `~` or `@` in the stream)


_STAMP = STAMP.encode()
_PID = os.getpid()


def turn_plan(tag: str, seconds: float, rate: float) -> list[dict[str, Any]]:
    """One turn's deltas, in order; text streams start with the stamp placeholder."""
    reasoning, tool, command, message = f"r{tag}", f"t{tag}", f"c{tag}", f"m{tag}"
    tokens = max(60, int(seconds * rate))
    thinking = tokens // 5
    answer = tokens - thinking - 20
    words = [stream.WORDS[i % len(stream.WORDS)] for i in range(max(thinking, answer))]
    plan: list[dict[str, Any]] = [{"kind": "turn.open"}]
    plan += [
        stream.text_delta(reasoning, "reasoningText", (STAMP if i == 0 else "") + words[i]) for i in range(thinking)
    ]
    plan.append({"kind": "item.textClose", "key": {"providerItemId": reasoning}, "channel": "reasoningText"})
    plan += work_items(tool, command, f"src/{tag}.py", 8, lambda i: STAMP if i == 0 else "")
    plan += [stream.text_delta(message, "agentMessage", (STAMP if i == 0 else "") + words[i]) for i in range(answer)]
    plan.append({"kind": "item.textClose", "key": {"providerItemId": message}, "channel": "agentMessage"})
    plan.append({"kind": "usage", "total": stream.USAGE, "last": stream.USAGE, "modelContextWindow": 200000})
    plan.append({"kind": "turn.boundary", "status": "completed"})
    return plan


def work_items(tool: str, command: str, path: str, lines: int, stamp: Callable[[int], str]) -> list[dict[str, Any]]:
    """A tool call (open, progress, close) then a command with `lines` lines of output, each line prefixed by
    `stamp(i)` (the stamp's place, or nothing)."""
    shape = {"type": "tool", "tool": "Read", "args": {"path": path}}
    run = {"type": "command", "command": "pytest -q", "cwd": "/work/repo"}
    return [
        {"kind": "item.open", "key": {"providerItemId": tool}, "item": shape},
        {"kind": "item.progress", "key": {"providerItemId": tool}, "message": "reading"},
        {"kind": "item.close", "key": {"providerItemId": tool}, "status": "completed", "item": {**shape, "result": "ok"}},
        {"kind": "item.open", "key": {"providerItemId": command}, "item": run},
        *(
            {"kind": "item.outputDelta", "key": {"providerItemId": command}, "channel": "command",
             "text": stamp(i) + f"line {i}\n"}
            for i in range(lines)
        ),
        {"kind": "item.close", "key": {"providerItemId": command}, "status": "completed", "item": run, "exitCode": 0,
         "aggregatedOutput": f"{lines} passed\n"},
    ]  # fmt: skip


_THREAD = "~thread~"  # the thread id's place in a turn's encoded lines (no thread id contains `~`)
_THREAD_BYTES = _THREAD.encode()


class Streams:
    """Every scheduled delta of every thread, in `TICK_S` slots; `due()` takes every slot that is due now.

    A turn's lines are encoded once per (seconds, rate) with the thread's place held open, then filled by a bytes
    replace: a thousand turns starting within a second would otherwise cost seconds of encoding, and the bridge
    would write their first deltas late."""

    def __init__(self) -> None:
        self.slots: dict[int, list[bytes]] = {}
        self.next_slot = int(time.monotonic() / TICK_S)
        self.templates: dict[tuple[float, float], list[bytes]] = {}
        self.stamps = 0

    def schedule(self, thread: str, seconds: float, rate: float) -> None:
        template = self.templates.get((seconds, rate))
        if template is None:
            template = self.templates[(seconds, rate)] = [
                stream.notification(_THREAD, d) for d in turn_plan(_THREAD, seconds, rate)
            ]
        start = time.monotonic() + random.random()
        name = thread.encode()
        slots = self.slots
        for n, line in enumerate(template):
            slot = max(self.next_slot, math.ceil((start + n / rate) / TICK_S))
            slots.setdefault(slot, []).append(line.replace(_THREAD_BYTES, name))

    def due(self) -> bytes:
        now_slot = int(time.monotonic() / TICK_S)
        out: list[bytes] = []
        while self.next_slot <= now_slot:
            lines = self.slots.pop(self.next_slot, None)
            if lines:
                out += lines
            self.next_slot += 1
        if not out:
            return b""
        chunk = b"".join(out)
        if _STAMP not in chunk:
            return chunk
        ns = time.monotonic_ns()
        parts = chunk.split(_STAMP)  # each stamp unique per stream: the send time, this bridge and a counter
        for n in range(1, len(parts)):
            self.stamps += 1
            parts[n] = f"@{ns}.{_PID}.{self.stamps}@".encode() + parts[n]
        return b"".join(parts)


def serve(start_turn: Callable[[str, list[str]], None], due: Callable[[], bytes]) -> None:
    """A fake bridge's loop on stdio: answers the runtime's requests (a `turn/start` is handed to `start_turn` with
    its thread and its prompt's words) and writes what `due` says is due, one write per tick, until stdin ends."""
    out, stdin = sys.stdout.buffer, sys.stdin.buffer
    carry = b""
    while True:
        readable, _, _ = select.select([stdin], [], [], TICK_S)
        replies: list[bytes] = []
        if readable:
            data = os.read(stdin.fileno(), 1 << 16)
            if not data:
                break
            *lines, carry = (carry + data).split(b"\n")
            for raw in lines:
                request = stream.request(raw)
                if request is None:
                    continue
                method, request_id, params = request
                if method == "turn/start":
                    replies.append(stream.answer(request_id, {}))
                    start_turn(str(params["threadId"]), str(params["input"][0]["text"]).split())
                else:
                    replies.append(stream.plain_answer(method, request_id, params))
        chunk = b"".join(replies) + due()
        if chunk:
            out.write(chunk)
            out.flush()


def main() -> None:
    streams = Streams()
    serve(lambda thread_id, words: streams.schedule(thread_id, float(words[1]), float(words[2])), streams.due)


if __name__ == "__main__":
    main()
