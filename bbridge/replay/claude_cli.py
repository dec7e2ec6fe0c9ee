"""The `claude-cli` dialect of the fake provider child (protocol.md §6.4, claude-code-bridge.md §7.2).

The Claude Code CLI speaks stream-json, not JSON-RPC: every line is an object
led by its `type`. Requests are `control_request`s (either side mints
`request_id`), answers are `control_response`s naming `response.request_id`,
and every other line is a notification keyed `<type>[:<subtype>]`. A bridge
registers hook callbacks in its `initialize` and the CLI calls them back by
id, so the ids the recording used are rewritten to the ones the live bridge
registered, aligned by hook event name and position.
"""

from __future__ import annotations

from typing import Any

INITIALIZE = "control_request:initialize"
HOOK_CALLBACK = "hook_callback"


def _valid_id(value: Any) -> bool:
    return type(value) in (str, int, float)


def _request(message: dict[str, Any]) -> dict[str, Any]:
    body = message.get("request")
    return body if isinstance(body, dict) else {}


class ClaudeCli:
    """Classifies, re-addresses and answers stream-json lines; remembers one bridge's hook callback ids."""

    initialize = INITIALIZE

    def __init__(self) -> None:
        self.hook_ids: dict[str, str] = {}  # recorded callback id → the live bridge's

    def classify(self, message: dict[str, Any]) -> tuple[str, str, Any]:
        kind = message.get("type")
        if kind == "control_request" and _valid_id(message.get("request_id")):
            return "request", f"control_request:{_request(message).get('subtype')}", message["request_id"]
        response = message.get("response")
        if kind == "control_response" and isinstance(response, dict) and _valid_id(response.get("request_id")):
            return "response", "control_response", response["request_id"]
        subtype = message.get("subtype")
        return "notification", f"{kind}:{subtype}" if isinstance(subtype, str) else str(kind), None

    def readdress(self, message: dict[str, Any], live_id: Any) -> dict[str, Any]:
        response = {k: (live_id if k == "request_id" else v) for k, v in message["response"].items()}
        return {k: (response if k == "response" else v) for k, v in message.items()}

    def generic(self, request_id: Any) -> dict[str, Any]:
        """The CLI's success envelope (as recorded for `initialize`) with an empty body."""
        return {
            "type": "control_response",
            "response": {"subtype": "success", "request_id": request_id, "response": {}},
        }

    def learn(self, recorded: dict[str, Any], live: dict[str, Any]) -> None:
        """A matched `initialize`: pair its recorded hook callback ids with the live ones by (event, matcher, index)."""
        if _request(recorded).get("subtype") != "initialize":
            return
        self.hook_ids = {}
        for (event, matcher, index), recorded_id in _hook_ids(recorded).items():
            live_id = _hook_ids(live).get((event, matcher, index))
            if live_id is not None:
                self.hook_ids[recorded_id] = live_id

    def rewrite(self, message: dict[str, Any]) -> dict[str, Any]:
        """A recorded `hook_callback` names the callback id the live bridge registered in its place."""
        request = _request(message)
        callback = request.get("callback_id")
        if message.get("type") != "control_request" or request.get("subtype") != HOOK_CALLBACK:
            return message
        if not isinstance(callback, str) or callback not in self.hook_ids:
            return message
        request = {k: (self.hook_ids[callback] if k == "callback_id" else v) for k, v in request.items()}
        return {k: (request if k == "request" else v) for k, v in message.items()}


def _hook_ids(initialize: dict[str, Any]) -> dict[tuple[str, int, int], str]:
    """`hooks: {event: [{hookCallbackIds: [id, ...]}, ...]}` flattened to (event, matcher index, id index) → id."""
    hooks = _request(initialize).get("hooks")
    found: dict[tuple[str, int, int], str] = {}
    if not isinstance(hooks, dict):
        return found
    for event, matchers in hooks.items():
        for matcher, entry in enumerate(matchers if isinstance(matchers, list) else []):
            ids = entry.get("hookCallbackIds") if isinstance(entry, dict) else None
            for index, callback in enumerate(ids if isinstance(ids, list) else []):
                if isinstance(callback, str):
                    found[(event, matcher, index)] = callback
    return found
