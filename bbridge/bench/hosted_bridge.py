"""The hosted-call benchmark's bridge: calls a tool the daemon hosts, one call at a time, timing each (stdlib only).

Usage: python -m bbridge.bench.hosted_bridge OUT

`turn/start` whose first input text is `hosted CALLS TOOL` opens the turn, then sends CALLS `item/tool/call`
requests for TOOL with the arguments `{"n": "<call number>"}`, each only once the previous one is answered, and
times each from just before its line is written to just after its answer is read (monotonic ns). It writes
`{"calls_ns": [...], "failed": [...]}` to OUT (the call numbers whose answer was no successful result), then
closes the turn.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, BinaryIO

from bbridge.bench import stream


def _answer_to(source: BinaryIO, out: BinaryIO, request_id: str) -> dict[str, Any]:
    """Read until the answer to `request_id`; a request the daemon sends meanwhile is answered as usual."""
    for raw in source:
        if not raw.strip():
            continue
        message = json.loads(raw)
        if "method" not in message:
            if message.get("id") == request_id:
                return dict(message)
        elif "id" in message:
            out.write(stream.plain_answer(message["method"], message["id"], message.get("params") or {}))
            out.flush()
    raise EOFError("the daemon closed the bridge's stdin mid-call")


def _calls(source: BinaryIO, out: BinaryIO, params: dict[str, Any], calls: int, tool: str) -> dict[str, Any]:
    thread = str(params["threadId"])
    timings, failed = [], []
    for n in range(calls):
        request_id = f"hosted-{n}"
        call = {
            "providerThreadId": f"p-{thread}",
            "threadId": thread,
            "turnId": None,
            "callId": f"call-{n}",
            "tool": tool,
            "arguments": {"n": str(n)},
        }
        line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "item/tool/call", "params": call}).encode()
        sent = time.monotonic_ns()
        out.write(line + b"\n")
        out.flush()
        reply = _answer_to(source, out, request_id)
        timings.append(time.monotonic_ns() - sent)
        if not (reply.get("result") or {}).get("success"):
            failed.append(n)
    return {"calls_ns": timings, "failed": failed}


def main() -> None:
    source, out, report = sys.stdin.buffer, sys.stdout.buffer, sys.argv[1]
    while raw := source.readline():
        request = stream.request(raw)
        if request is None:
            continue
        method, request_id, params = request
        if method != "turn/start":
            out.write(stream.plain_answer(method, request_id, params))
            out.flush()
            continue
        words = str(params["input"][0]["text"]).split()
        out.write(stream.answer(request_id, {}))
        thread = str(params["threadId"])
        out.write(stream.notification(thread, {"kind": "turn.open"}))
        out.flush()
        figures = _calls(source, out, params, int(words[1]), words[2])
        with open(report, "w", encoding="utf-8") as file:
            json.dump(figures, file)
        out.write(stream.notification(thread, {"kind": "turn.boundary", "status": "completed"}))
        out.flush()


if __name__ == "__main__":
    main()
