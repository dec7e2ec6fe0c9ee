"""The Perspectives benchmark's bridge: an agent that calls `gather_perspectives`, and instant panel members
(stdlib only).

Usage: python -m bbridge.bench.panel_bridge caller OUT
       python -m bbridge.bench.panel_bridge panel

`caller`: a turn whose first input text is `gather LENS...` sends one `item/tool/call` of `gather_perspectives`
with those lenses, reads its answer (the launch receipt) and ends the turn. The run's one delivery comes back later
as a `turn/start` (a `turn/steer` of the ended turn is refused, as an agent with no open turn refuses it, and the
room then starts a turn) whose text begins `Perspectives panel`; once its line is read, one JSON line
`{"call_ns", "receipt_ns", "delivered_ns", "result"}` is appended to OUT (monotonic ns: from just before the call's
line is written, to just after its answer is read, to just after the delivery's line is read) and the turn is
answered and ended at once. Requests that arrive while a call waits are answered meanwhile.

`panel`: every Perspectives prompt answered at once, in one turn of a few deltas: the planner's plan (one prompt per
lens its schema enumerates), a worker's finding on its lens, the synthesis quoting every finding.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import time
from typing import Any, BinaryIO

from bbridge.bench import stream

DELIVERY_HEAD = "Perspectives panel"
TOOL = "gather_perspectives"
MODEL = {
    "id": "bench-1", "model": "bench-1", "displayName": "Bench 1", "description": "answers at once",
    "supportedReasoningEfforts": [{"reasoningEffort": "low", "description": "low"}],
    "defaultReasoningEffort": "low", "isDefault": True,
}  # fmt: skip
MODELS = {"models": [MODEL], "selectedOnlyModels": []}
_ITEMS = itertools.count(1)


def _text(params: dict[str, Any]) -> str:
    inputs = params.get("input") or []
    first = inputs[0] if inputs and isinstance(inputs[0], dict) else {}
    return str(first.get("text") or "")


def _opened(thread: str, params: dict[str, Any]) -> bytes:
    """A turn opened and its input accepted."""
    accepted = {"kind": "input.accepted", "clientRequestId": params.get("clientRequestId")}
    return stream.notification(thread, {"kind": "turn.open"}, accepted)


def _ended(thread: str, text: str) -> bytes:
    """The open turn's one agent message (a fresh item key), then its end."""
    item = f"m{next(_ITEMS)}"
    close = {"kind": "item.textClose", "key": {"providerItemId": item}, "channel": "agentMessage"}
    return stream.notification(thread, stream.text_delta(item, "agentMessage", text)) + stream.notification(
        thread, close, {"kind": "turn.boundary", "status": "completed"}
    )


def panel_text(prompt: str) -> str:
    """What an instant panel member answers to a Perspectives prompt."""
    if "JSON Schema:\n" in prompt:
        schema = json.loads(prompt.rsplit("JSON Schema:\n", 1)[1])
        items = schema.get("properties", {}).get("prompts", {}).get("items", {})
        lenses = items.get("properties", {}).get("lens", {}).get("enum")
        if lenses:
            return json.dumps({"prompts": [{"lens": lens, "prompt": f"Examine {lens} closely."} for lens in lenses]})
        return json.dumps({"answer": 42})
    worker = re.search(r"^Your lens: (.+)$", prompt, re.M)
    if worker:
        return f"Finding on {worker.group(1)}: see [a.py:1](a.py#L1)."
    if prompt.startswith("You synthesize"):
        found = re.findall(r"^Finding on .*$", prompt, re.M)
        return "Synthesis of the panel:\n" + "\n".join(found)
    return "Expert answer: 42"


def _answer(method: str | None, request_id: Any, params: dict[str, Any]) -> bytes:
    if method == "model/list":
        return stream.answer(request_id, MODELS)
    if method == "turn/steer":  # no turn is ever left open: there is nothing to steer
        error = {"code": -32001, "message": "no active turn"}
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode() + b"\n"
    return stream.plain_answer(method, request_id, params)


class Caller:
    """The calling agent's side: one `gather_perspectives` call per turn, then its delivery timed."""

    def __init__(self, source: BinaryIO, out: BinaryIO, report: str) -> None:
        self.source, self.out, self.report = source, out, report
        self.calls = 0
        self.timed: dict[str, int] = {}

    def handle(self, method: str | None, request_id: Any, params: dict[str, Any]) -> None:
        if method == "turn/start":
            text = _text(params)
            if text.startswith(DELIVERY_HEAD):
                self.delivered(request_id, params, text)
            else:
                self.call(request_id, params, text.split()[1:])
            return
        self.out.write(_answer(method, request_id, params))
        self.out.flush()

    def call(self, request_id: Any, params: dict[str, Any], lenses: list[str]) -> None:
        thread = str(params["threadId"])
        self.out.write(stream.answer(request_id, {}))
        self.out.write(_opened(thread, params))
        self.calls += 1
        call_id = f"gather-{self.calls}"
        call = {
            "providerThreadId": f"p-{thread}",
            "threadId": thread,
            "turnId": None,
            "callId": call_id,
            "tool": TOOL,
            "arguments": {"question": "Where does this service spend its time?", "lenses": lenses},
        }
        line = json.dumps({"jsonrpc": "2.0", "id": call_id, "method": "item/tool/call", "params": call}).encode()
        self.timed = {"call_ns": time.monotonic_ns()}
        self.out.write(line + b"\n")
        self.out.flush()
        reply = self._answer_to(call_id)
        self.timed["receipt_ns"] = time.monotonic_ns()
        receipt = json.dumps(reply.get("result", reply.get("error")))
        self.out.write(_ended(thread, receipt))
        self.out.flush()

    def _answer_to(self, call_id: str) -> dict[str, Any]:
        """Read until the answer to `call_id`; a request that arrives meanwhile is answered as usual."""
        for raw in self.source:
            if not raw.strip():
                continue
            message = json.loads(raw)
            if "method" not in message:
                if message.get("id") == call_id:
                    return dict(message)
            elif "id" in message:
                self.handle(message["method"], message["id"], message.get("params") or {})
        raise EOFError("the daemon closed the bridge's stdin mid-call")

    def delivered(self, request_id: Any, params: dict[str, Any], text: str) -> None:
        delivered = time.monotonic_ns()
        self.out.write(stream.answer(request_id, {}))
        thread = str(params["threadId"])
        self.out.write(_opened(thread, params) + _ended(thread, "Noted."))
        self.out.flush()
        result = "result" if text.startswith(f"{DELIVERY_HEAD} result") else "failed"
        with open(self.report, "a", encoding="utf-8") as file:
            file.write(json.dumps({**self.timed, "delivered_ns": delivered, "result": result}) + "\n")


def main() -> None:
    source, out = sys.stdin.buffer, sys.stdout.buffer
    caller = Caller(source, out, sys.argv[2]) if sys.argv[1] == "caller" else None
    while raw := source.readline():
        request = stream.request(raw)
        if request is None:
            continue
        method, request_id, params = request
        if caller is not None:
            caller.handle(method, request_id, params)
        elif method == "turn/start":
            out.write(stream.answer(request_id, {}))
            thread = str(params["threadId"])
            out.write(_opened(thread, params) + _ended(thread, panel_text(_text(params))))
            out.flush()
        else:
            out.write(_answer(method, request_id, params))
            out.flush()


if __name__ == "__main__":
    main()
