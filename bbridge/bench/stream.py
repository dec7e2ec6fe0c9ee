"""The synthetic bridge stream the daemon benchmark replays (stdlib only).

A realistic mix per turn, one delta per `thread/delta` notification as the
recorded bridges mostly send them: reasoning text, a tool call with progress,
a command with streamed output, the agent's answer streamed token by token,
usage, and the turn boundary — 64 deltas, three quarters of them text. Many
threads' turns are interleaved line by line. Every line is pre-encoded, so
the bridge spends its time writing, not encoding.

A separate probe thread keeps one turn and one agent message open; its text
deltas carry the bridge's send time (`@<monotonic ns>@`) for the latency figures.
"""

from __future__ import annotations

import json
from typing import Any

PROBE_THREAD = "bench-probe"
MARK = "@"  # the only `@` in the stream: around probe stamps (`@<ns>@`) and the done marker (`@done:…@`)
DONE = "done"
USAGE = {
    "totalTokens": 5400, "inputTokens": 5000, "cachedInputTokens": 4000,
    "outputTokens": 400, "reasoningOutputTokens": 120,
}  # fmt: skip
WORDS = (" the", " function", " returns", " a", " list", " of", " events", " in", " order", ",", " and", " then")


# the benchmark bridges' answer to `initialize`
HANDSHAKE = {"protocolVersion": 2, "capabilities": {"grammarVersions": [3, 3]}}


def answer(request_id: Any, result: Any) -> bytes:
    """A benchmark bridge's JSON-RPC result line."""
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode() + b"\n"


def request(raw: bytes) -> tuple[str | None, Any, dict[str, Any]] | None:
    """A runtime line as the benchmark bridges read it: (method, id, params), None for a blank line or a
    notification (they answer requests only)."""
    if not raw.strip():
        return None
    message = json.loads(raw)
    request_id = message.get("id")
    if request_id is None:
        return None
    return message.get("method"), request_id, message.get("params") or {}


def plain_answer(method: str | None, request_id: Any, params: dict[str, Any]) -> bytes:
    """A benchmark bridge's answer to any request but `turn/start`: the handshake to `initialize`, a provider
    thread id to a construction, `{}` to the rest."""
    if method == "initialize":
        return answer(request_id, HANDSHAKE)
    if method in ("thread/start", "thread/resume", "thread/fork"):
        return answer(request_id, {"providerThreadId": f"p-{params['threadId']}"})
    return answer(request_id, {})


def notification(thread_id: str, *deltas: dict[str, Any]) -> bytes:
    params = {"threadId": thread_id, "deltas": list(deltas)}
    message = {"jsonrpc": "2.0", "method": "thread/delta", "params": params}
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def text_delta(item: str, channel: str, text: str) -> dict[str, Any]:
    """A text delta of a provider item's channel (the benchmark bridges' commonest line)."""
    return {"kind": "item.textDelta", "key": {"providerItemId": item}, "channel": channel, "text": text}


def _close(pid: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "item.close", "key": {"providerItemId": pid}, "status": "completed", **fields}


def turn_deltas(tag: str) -> list[dict[str, Any]]:
    """One turn's 64 deltas; `tag` makes its provider item ids unique."""
    reasoning, tool, command, message = f"r{tag}", f"t{tag}", f"c{tag}", f"m{tag}"
    args = {"path": f"src/module_{tag}.py", "limit": 200}
    deltas: list[dict[str, Any]] = [{"kind": "turn.open"}]
    deltas += [text_delta(reasoning, "reasoningText", WORDS[i % len(WORDS)]) for i in range(8)]
    deltas.append({"kind": "item.textClose", "key": {"providerItemId": reasoning}, "channel": "reasoningText"})
    tool_shape = {"type": "tool", "tool": "Read", "args": args}
    deltas.append({"kind": "item.open", "key": {"providerItemId": tool}, "item": tool_shape})
    deltas.append({"kind": "item.progress", "key": {"providerItemId": tool}, "message": "reading"})
    deltas.append(_close(tool, item={**tool_shape, "result": {"lines": 120, "truncated": False}}))
    command_shape = {"type": "command", "command": "pytest -q tests/test_module.py", "cwd": "/work/repo"}
    deltas.append({"kind": "item.open", "key": {"providerItemId": command}, "item": command_shape})
    deltas += [
        {"kind": "item.outputDelta", "key": {"providerItemId": command}, "channel": "command", "text": f"line {i}\n"}
        for i in range(6)
    ]
    deltas.append(_close(command, item=command_shape, exitCode=0, aggregatedOutput="6 passed in 0.12s\n"))
    deltas += [text_delta(message, "agentMessage", WORDS[i % len(WORDS)]) for i in range(40)]
    deltas.append({"kind": "item.textClose", "key": {"providerItemId": message}, "channel": "agentMessage"})
    deltas.append({"kind": "usage", "total": USAGE, "last": USAGE, "modelContextWindow": 200000})
    deltas.append({"kind": "turn.boundary", "status": "completed"})
    return deltas


DELTAS_PER_TURN = len(turn_deltas(""))
SHORT_TURN_OPEN = 4  # the first deltas of `short_turn`: an open turn with a streaming agent message


def short_turn(tag: str) -> list[dict[str, Any]]:
    """A short turn in one notification: open, a streamed answer, its close, usage, boundary."""
    message = f"m{tag}"
    deltas: list[dict[str, Any]] = [{"kind": "turn.open"}]
    deltas += [text_delta(message, "agentMessage", word) for word in (" Done", ": the tests", " pass.")]
    deltas.append({"kind": "item.textClose", "key": {"providerItemId": message}, "channel": "agentMessage"})
    deltas.append({"kind": "usage", "total": USAGE, "last": USAGE, "modelContextWindow": 200000})
    deltas.append({"kind": "turn.boundary", "status": "completed"})
    return deltas


def interleaved_lines(prefix: str, threads: int, turns: int) -> list[bytes]:
    """`turns` turns spread over `threads` threads, their notifications interleaved round robin."""
    per_thread = [
        [notification(f"bench-{t}", delta) for n in range(t, turns, threads) for delta in turn_deltas(f"{prefix}{n}")]
        for t in range(threads)
    ]
    out: list[bytes] = []
    longest = max((len(lines) for lines in per_thread), default=0)
    for index in range(longest):
        out.extend(lines[index] for lines in per_thread if index < len(lines))
    return out


def probe_open() -> bytes:
    return notification(PROBE_THREAD, {"kind": "turn.open"})


def probe_line(phase: str, sent_ns: int) -> bytes:
    """A probe text delta stamped with its send time."""
    return notification(PROBE_THREAD, text_delta(f"probe-{phase}", "agentMessage", f"{MARK}{sent_ns}{MARK}"))


def probe_done(phase: str, deltas: int, started_ns: int, late_wakes: int) -> bytes:
    """Settles the probe turn and names the phase's delta count, start time and the bridge's late wakes
    (see `bbridge.bench.fake_bridge`) for the client."""
    return notification(
        PROBE_THREAD,
        # an empty final text settles nothing: no `item/completed` repeats the stamps
        {"kind": "item.textClose", "key": {"providerItemId": f"probe-{phase}"}, "channel": "agentMessage", "text": ""},
        {"kind": "turn.boundary", "status": "completed"},
        {"kind": "thread.name", "name": f"{MARK}{DONE}:{phase}:{deltas}:{started_ns}:{late_wakes}{MARK}"},
    )
