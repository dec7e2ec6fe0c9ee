"""The ACP JSON Schema check of tests/acp_schema.py, on what a real ACP agent wrote: every line Cursor's agent
sent in the ACP bridge's recordings (`recordings/acp-cursor/*/provider→bridge.ndjson`, the bridge's requests read
from `bridge→provider.ndjson` so each answer is checked against its method) is valid; and messages an agent
must not write are caught, each with where it is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.acp_schema import AgentTraffic, acpx_problems, definition

CELLS = ["approval-allow", "turn-tools", "user-question", "stop-interrupt"]


def traffic(cell: Path) -> list[tuple[str, dict[str, Any]]]:
    """The cell's ACP lines in the order they were written: (`agent` | `client`, message)."""
    entries = []
    for name, side in (("provider→bridge.ndjson", "agent"), ("bridge→provider.ndjson", "client")):
        for line in (cell / name).read_text().splitlines():
            entry = json.loads(line)
            entries.append((entry["seq"], side, json.loads(entry["line"])))
    return [(side, message) for _, side, message in sorted(entries, key=lambda e: e[0])]


@pytest.mark.parametrize("cell", CELLS)
def test_every_message_cursors_agent_wrote_is_valid(recordings_root: Path, cell: str) -> None:
    seen = AgentTraffic()
    methods = set()
    for side, message in traffic(recordings_root / "acp-cursor" / cell):
        if side == "client":
            seen.client_sent(message)
            continue
        methods.add(message.get("method") or "response")
        assert seen.agent_sent(message) == [], message
    assert seen.checked > 5 and {"session/update", "response"} <= methods


def test_the_definitions_picked_for_each_kind_of_message() -> None:
    assert definition("session/update", "notification", "client") == "SessionNotification"
    assert definition("session/request_permission", "request", "client") == "RequestPermissionRequest"
    assert definition("session/prompt", "response", "agent") == "PromptResponse"
    assert definition("session/new", "response", "agent") == "NewSessionResponse"
    assert definition("session/new", "request", "client") is None  # the agent never sends it


def test_what_an_agent_must_not_write_is_caught() -> None:
    seen = AgentTraffic()
    seen.client_sent({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": {}})
    seen.client_sent({"jsonrpc": "2.0", "id": "n", "method": "session/new", "params": {}})
    [stop] = seen.agent_sent({"jsonrpc": "2.0", "id": 7, "result": {"stopReason": "done"}})
    assert stop.startswith("PromptResponse at /stopReason:")
    assert seen.agent_sent({"jsonrpc": "2.0", "id": "n", "result": {}})  # no sessionId
    [again] = seen.agent_sent({"jsonrpc": "2.0", "id": 7, "result": {"stopReason": "end_turn"}})
    assert "did not ask" in again  # answered already
    update = {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "txt"}}}
    assert seen.agent_sent({"jsonrpc": "2.0", "method": "session/update", "params": update})
    assert seen.agent_sent({"jsonrpc": "1.0", "method": "session/update", "params": {}})
    assert seen.agent_sent({"jsonrpc": "2.0", "method": "session/prompt", "params": {}})  # a client's method
    assert seen.agent_sent({"jsonrpc": "2.0", "method": "_bb/anything", "params": {"x": 1}}) == []  # extension
    ok = {
        "sessionId": "s",
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}},
    }
    assert seen.agent_sent({"jsonrpc": "2.0", "method": "session/update", "params": ok}) == []


def test_a_whole_session_as_acpx_prints_it_is_split_by_side_though_both_count_ids_from_0() -> None:
    """The client's `initialize` and the agent's permission request both have id 0: each answer is checked as the
    right side's (the client's answer to the agent is not the agent's)."""
    lines = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {"sessionId": "s", "prompt": []}},
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "session/request_permission",
            "params": {
                "sessionId": "s",
                "toolCall": {"toolCallId": "c"},
                "options": [{"kind": "allow_once", "name": "Allow", "optionId": "a"}],
            },
        },
        {"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "selected", "optionId": "a"}}},
        {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}},
    ]
    assert acpx_problems([json.dumps(line) for line in lines]) == ([], 3)
    lines[-1] = {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "finished"}}
    [problem], _ = acpx_problems([json.dumps(line) for line in lines])
    assert problem.startswith("PromptResponse at /stopReason")
