"""The ACP JSON Schema shipped in the SDK package (`make acp-agents`: `@agentclientprotocol/sdk`'s
`schema/schema.json`), as a test's check of what an ACP agent writes (issue 36: every message `bbridge acp` sends).

Each `$defs` entry of a method carries `x-method` and `x-side` (the side that handles it). What an agent writes:

* a request to the client (`session/request_permission`, `fs/*`, `terminal/*`, …): its params against the
  `…Request` of that method handled by the client;
* a notification (`session/update`, …): against the `…Notification` handled by the client;
* an answer to the client's request: its result against the `…Response` of the request's method handled by the
  agent (the method is known from the client's request of that id: `AgentTraffic` keeps them), or its error
  against `Error`.

`acpx_problems` checks a whole session as acpx prints it (`--format json`: both sides' messages, one per line).
Extension methods (`_name`) are not described by the schema; they are only checked as JSON-RPC. The envelope
(`jsonrpc`, `id`, `method`) is checked here, its body with jsonschema (draft 2020-12, `$ref`s into `$defs`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / ".cache" / "acp" / "npm" / "node_modules" / "@agentclientprotocol" / "sdk" / "schema" / "schema.json"
_URI = "urn:acp-schema"
_SUFFIX = {"request": "Request", "response": "Response", "notification": "Notification"}


@functools.cache
def _schema() -> dict[str, Any]:
    if not SCHEMA.exists():
        pytest.skip(f"the ACP SDK's JSON Schema is not installed ({SCHEMA}): run `make acp-agents`")
    loaded: dict[str, Any] = json.loads(SCHEMA.read_text())
    return loaded


@functools.cache
def _registry() -> Registry:  # type: ignore[type-arg]
    return Registry().with_resource(_URI, Resource.from_contents(_schema()))


def definition(method: str, kind: str, side: str) -> str | None:
    """The `$defs` name of `method`'s `kind` (request, response, notification) handled by `side` (agent,
    client, protocol); None when the schema has none (an extension method, or a method of the other side)."""
    for name, body in _schema()["$defs"].items():
        if body.get("x-method") == method and body.get("x-side") == side and name.endswith(_SUFFIX[kind]):
            return name
    return None


def problems(instance: Any, name: str) -> list[str]:
    """What is wrong with `instance` as `$defs[name]` (nothing: valid), each error with where it is."""
    validator = jsonschema.Draft202012Validator({"$ref": f"{_URI}#/$defs/{name}"}, registry=_registry())
    return [
        f"{name} at /{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    ]


@dataclass
class AgentTraffic:
    """One ACP connection seen from both sides: the client's requests are kept (id → method) so the agent's
    answers can be checked against their method's response; `agent_sent` checks one message the agent wrote."""

    asked: dict[Any, str] = field(default_factory=dict)  # the client's requests not yet answered
    checked: int = 0

    def client_sent(self, message: dict[str, Any]) -> None:
        if "method" in message and "id" in message:
            self.asked[_key(message["id"])] = message["method"]

    def agent_sent(self, message: Any) -> list[str]:
        """What is wrong with one message an agent wrote (nothing: valid)."""
        self.checked += 1
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return [f'not a JSON-RPC 2.0 object (jsonrpc must be "2.0"): {str(message)[:200]}']
        method = message.get("method")
        if isinstance(method, str):
            kind = "request" if "id" in message else "notification"
            if kind == "request" and not _is_id(message["id"]):
                return [f"{method}: the request's id must be a string, an integer or null"]
            return self._body(method, kind, "client", message.get("params"))
        if "id" not in message:
            return [f"neither a request, a notification nor a response: {str(message)[:200]}"]
        asked = self.asked.pop(_key(message["id"]), None)
        if asked is None:
            return [f"a response to id {message['id']!r}, which the client did not ask (or was answered already)"]
        if ("result" in message) == ("error" in message):
            return [f"the response to {asked} must carry exactly one of result and error"]
        if "error" in message:
            return problems(message["error"], "Error")
        return self._body(asked, "response", "agent", message["result"])

    @staticmethod
    def _body(method: str, kind: str, side: str, body: Any) -> list[str]:
        if method.startswith("_"):
            return []  # an extension method: the schema describes no body
        name = definition(method, kind, side) or definition(method, kind, "protocol")
        if name is None:
            return [f"{method}: no {kind} of this method is handled by the {side} in the ACP schema"]
        return problems({} if body is None and kind != "response" else body, name)


def acpx_problems(lines: list[str]) -> tuple[list[str], int]:
    """What is wrong with what the agent wrote in acpx's `--format json` output (both sides interleaved), and how
    many of the agent's messages were checked. A request's side is its method's (the schema says which side
    handles it); a response answers the latest open request of its id, from the other side (both sides count
    ids from 0)."""
    seen = AgentTraffic()
    open_requests: list[tuple[bool, str]] = []  # (opened by the client, id), in opening order
    found: list[str] = []
    for line in lines:
        message = json.loads(line)
        if not isinstance(message, dict):
            found += seen.agent_sent(message)
            continue
        method, key = message.get("method"), _key(message["id"]) if "id" in message else None
        if isinstance(method, str):
            from_client = definition(method, "request" if key is not None else "notification", "agent") is not None
            if key is not None:
                open_requests.append((from_client, key))
            if from_client:
                seen.client_sent(message)
            else:
                found += seen.agent_sent(message)
            continue
        answered = next((entry for entry in reversed(open_requests) if entry[1] == key), None)
        if answered is not None:
            open_requests.remove(answered)
        if answered is None or answered[0]:  # an answer to the client's request (or to nothing): the agent's
            found += seen.agent_sent(message)
    return found, seen.checked


def _key(request_id: Any) -> str:
    return json.dumps(request_id)


def _is_id(value: Any) -> bool:
    return value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
