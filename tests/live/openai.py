"""A scripted OpenAI Responses API server for live tests of the real Codex CLI, fully offline.

`ScriptedResponses` is a `tests.live.scripted` server on 127.0.0.1 (a free port) in a background thread. Every
`POST .../responses` pops the next scripted `Reply` (or the default) and answers it as the real API does: an SSE
stream (`response.created`, `response.output_item.added`/`.done`, text and reasoning-summary deltas, function-call
argument deltas, `response.completed` with usage) or an HTTP error with the API's JSON error body. Anything else
codex asks for (`GET .../models`, ...) gets a small JSON answer, so nothing hangs. Every request is recorded.

    with ScriptedResponses() as api:
        api.push(reasoning_and_text("thinking", "hello"))
        ... point codex at api.base_url ...
        api.wait_for_posts(1)

A `Reply` may stall after its first delta (`delay` seconds before each later event) to keep a turn running, e.g.
to interrupt it, or `hold` its stream open before the first event (a turn that runs with no item open yet); a
stalled stream ends at once when the server stops. `route`, when set, picks a reply from the
request itself (for concurrent sessions); `custom_tool_call` answers with a freeform tool call (`apply_patch`).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.live import scripted
from tests.live.scripted import Json


@dataclass(frozen=True)
class Reply:
    """One scripted answer to a `POST /responses`: SSE `events` (each a `data:` payload), or an HTTP error."""

    events: tuple[Json, ...] = ()
    status: int = 200
    error: Json | None = None  # the JSON body of an error answer (status != 200)
    delay: float = 0.0  # seconds slept before each event after the first delta: the stream stalls mid-output
    hold: float = 0.0  # seconds slept before the first event: the stream opens and says nothing yet


Request = scripted.Request


_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):06d}"


def _usage(input_tokens: int = 100, output_tokens: int = 20, reasoning_tokens: int = 0) -> Json:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _message(index: int, text: str, chunk: int) -> list[Json]:
    item_id = _id("msg")
    part = {"type": "output_text", "text": "", "annotations": []}
    done_item = {
        "id": item_id,
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{**part, "text": text}],
    }
    ref = {"item_id": item_id, "output_index": index, "content_index": 0}
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**done_item, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **ref, "part": part},
        *({"type": "response.output_text.delta", **ref, "delta": d} for d in _chunks(text, chunk)),
        {"type": "response.output_text.done", **ref, "text": text},
        {"type": "response.content_part.done", **ref, "part": {**part, "text": text}},
        {"type": "response.output_item.done", "output_index": index, "item": done_item},
    ]


def _reasoning(index: int, summary: str, chunk: int) -> list[Json]:
    item_id = _id("rs")
    ref = {"item_id": item_id, "output_index": index, "summary_index": 0}
    part = {"type": "summary_text", "text": ""}
    done_item = {"id": item_id, "type": "reasoning", "summary": [{**part, "text": summary}], "encrypted_content": None}
    return [
        {"type": "response.output_item.added", "output_index": index, "item": {**done_item, "summary": []}},
        {"type": "response.reasoning_summary_part.added", **ref, "part": part},
        *({"type": "response.reasoning_summary_text.delta", **ref, "delta": d} for d in _chunks(summary, chunk)),
        {"type": "response.reasoning_summary_text.done", **ref, "text": summary},
        {"type": "response.reasoning_summary_part.done", **ref, "part": {**part, "text": summary}},
        {"type": "response.output_item.done", "output_index": index, "item": done_item},
    ]


def _function_call(index: int, name: str, arguments: str, call_id: str, chunk: int) -> list[Json]:
    item_id = _id("fc")
    done_item = {
        "id": item_id,
        "type": "function_call",
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }
    ref = {"item_id": item_id, "output_index": index}
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**done_item, "status": "in_progress", "arguments": ""},
        },
        *({"type": "response.function_call_arguments.delta", **ref, "delta": d} for d in _chunks(arguments, chunk)),
        {"type": "response.function_call_arguments.done", **ref, "arguments": arguments},
        {"type": "response.output_item.done", "output_index": index, "item": done_item},
    ]


def _custom_tool_call(index: int, name: str, text: str, call_id: str, chunk: int) -> list[Json]:
    """A freeform (`custom`) tool call, e.g. `apply_patch` with a lark grammar: `input` is the raw text."""
    item_id = _id("ctc")
    done_item = {"id": item_id, "type": "custom_tool_call", "status": "completed", "call_id": call_id, "name": name}
    done_item["input"] = text
    ref = {"item_id": item_id, "output_index": index}
    return [
        {"type": "response.output_item.added", "output_index": index, "item": {**done_item, "input": ""}},
        *({"type": "response.custom_tool_call_input.delta", **ref, "delta": d} for d in _chunks(text, chunk)),
        {"type": "response.custom_tool_call_input.done", **ref, "input": text},
        {"type": "response.output_item.done", "output_index": index, "item": done_item},
    ]


def _response(item_events: list[list[Json]], model: str, reasoning_tokens: int, delay: float) -> Reply:
    """Wrap the items' events in `response.created` ... `response.completed`, numbering `sequence_number`."""
    response_id = _id("resp")
    base = {"id": response_id, "object": "response", "created_at": int(time.time()), "model": model}
    outputs = [events[-1]["item"] for events in item_events]
    events: list[Json] = [
        {"type": "response.created", "response": {**base, "status": "in_progress", "output": []}},
        {"type": "response.in_progress", "response": {**base, "status": "in_progress", "output": []}},
        *(event for events in item_events for event in events),
        {
            "type": "response.completed",
            "response": {
                **base,
                "status": "completed",
                "output": outputs,
                "usage": _usage(output_tokens=20 + reasoning_tokens, reasoning_tokens=reasoning_tokens),
            },
        },
    ]
    return Reply(tuple({**event, "sequence_number": n} for n, event in enumerate(events)), delay=delay)


def text(message: str, *, chunk: int = 4, delay: float = 0.0, model: str = "gpt-5.5") -> Reply:
    """An assistant message streamed in `chunk`-character deltas."""
    return _response([_message(0, message, chunk)], model, 0, delay)


def reasoning_and_text(summary: str, message: str, *, chunk: int = 4, delay: float = 0.0) -> Reply:
    """A reasoning item with a streamed summary, then an assistant message."""
    return _response([_reasoning(0, summary, chunk), _message(1, message, chunk)], "gpt-5.5", 16, delay)


def function_call(
    name: str, arguments: Json, *, call_id: str = "call_1", preamble: str | None = None, delay: float = 0.0
) -> Reply:
    """A function call (arguments streamed as deltas), optionally after a short assistant message."""
    items = [_message(0, preamble, 8)] if preamble else []
    items.append(_function_call(len(items), name, json.dumps(arguments), call_id, 16))
    return _response(items, "gpt-5.5", 0, delay)


def custom_tool_call(
    name: str, text: str, *, call_id: str = "call_1", preamble: str | None = None, delay: float = 0.0
) -> Reply:
    """A custom (freeform) tool call such as `apply_patch`, whose input is plain text, optionally after a message."""
    items = [_message(0, preamble, 8)] if preamble else []
    items.append(_custom_tool_call(len(items), name, text, call_id, 32))
    return _response(items, "gpt-5.5", 0, delay)


def http_error(
    status: int = 401,
    message: str = "Incorrect API key provided: sk-dummy. You can find your API key at the dashboard.",
    *,
    error_type: str = "invalid_request_error",
    code: str | None = "invalid_api_key",
) -> Reply:
    """An HTTP error answer with the API's JSON error body."""
    return Reply(status=status, error={"error": {"message": message, "type": error_type, "param": None, "code": code}})


class ScriptedResponses(scripted.ScriptedServer[Request, Reply]):
    """The server: `push` replies, read `requests`/`posts()`; a context manager that starts and stops it."""

    name = "openai-responses-live"

    def __init__(self, default: Reply | None = None) -> None:
        super().__init__(default if default is not None else text("ok"))
        # Consulted first for every `POST /responses`: a Reply chosen from the request (concurrent sessions whose
        # order is not known, e.g. `bbridge conformance`), or None for the script.
        self.route: Callable[[Request], Reply | None] | None = None

    @property
    def base_url(self) -> str:
        """The provider `base_url` for codex: it appends `/responses`, `/models`, ... to it."""
        return f"http://{scripted.HOST}:{self.port}/v1"

    def is_call(self, request: Request) -> bool:
        return request.method == "POST" and request.path.endswith("/responses")

    def answer(self, request: Request) -> Reply:
        routed = self.route(request) if self.route is not None else None
        return routed if routed is not None else self.take(request)


class _Handler(scripted.ScriptedHandler[ScriptedResponses, Request]):
    # HTTP/1.0: each answer ends by closing the connection, so an SSE stream needs no length or chunking.
    protocol_version = "HTTP/1.0"

    def route(self, request: Request) -> None:
        if self.owner.is_call(request):
            self._respond(request, self.owner.answer(request))
        elif request.method == "GET" and request.path.endswith("/models"):
            self.json(request, 200, {"object": "list", "data": [], "models": []})
        else:
            self.json(
                request, 404, {"error": {"message": f"no route {request.target}", "type": "invalid_request_error"}}
            )

    def _respond(self, request: Request, reply: Reply) -> None:
        if reply.status != 200:
            self.json(request, reply.status, reply.error or {})
            return
        self.open_stream(request)
        self.owner.sleep(reply.hold)
        streaming = False
        for event in reply.events:
            if streaming and reply.delay:
                self.owner.sleep(reply.delay)
            self.event(json.dumps(event), event["type"])
            streaming = streaming or event["type"].endswith(".delta")
        self.close_stream(request)


ScriptedResponses.handler = _Handler
