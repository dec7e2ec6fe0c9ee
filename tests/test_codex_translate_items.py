"""The codex translator's items (spec §3.4) and their raw command output (§3.11): tools and their
presentations, declined items, delegations, shell closes repaired from raw output.
"""

from __future__ import annotations

from typing import Any

import pytest

from bridges.codex import presentation as p
from bridges.codex import rawoutput
from bridges.codex.translate import Translator
from tests.codex_notifications import THREAD, TURN, command, item, run

# -- §3.4 items ---------------------------------------------------------------------------


def test_mcp_tool_items_and_node_repl_presentations() -> None:
    t = Translator()
    (opened,) = item(
        t,
        "item/started",
        type="mcpToolCall",
        server="github",
        tool="list",
        status="inProgress",
        arguments=None,
        error=None,
        durationMs=None,
    )
    assert opened["item"] == {"type": "tool", "server": "github", "tool": "list", "args": None}
    assert opened["presentation"] == {
        "label": {"pending": "Running list", "completed": "Ran list"},
        "icon": {"glyph": "Toolbox"},
        "title": "github",
    }
    (closed,) = item(
        t,
        "item/completed",
        type="mcpToolCall",
        server="node_repl",
        tool="js",
        status="failed",
        arguments={"title": "Sum"},
        error={"message": "boom"},
        durationMs=4,
    )
    assert closed["status"] == "failed"
    assert closed["item"] == {
        "type": "tool",
        "server": "node_repl",
        "tool": "js",
        "args": {"title": "Sum"},
        "error": "boom",
        "durationMs": 4,
    }
    assert (
        closed["presentation"]["label"]["pending"] == "Running JavaScript" and closed["presentation"]["title"] == "Sum"
    )
    (reset,) = item(
        t,
        "item/started",
        type="mcpToolCall",
        server="node_repl",
        tool="js_reset",
        status="inProgress",
        error=None,
        durationMs=None,
    )
    assert "args" not in reset["item"] and reset["presentation"]["label"]["completed"] == "Reset JavaScript session"


def test_dynamic_tool_failure_text_and_injected_presentation() -> None:
    shown = p.make("Asking", "Asked", "Question")
    t = Translator({"ask": shown})
    content = [{"type": "inputText", "text": "  "}, {"type": "inputImage", "imageUrl": "u"}]
    (closed,) = item(
        t,
        "item/completed",
        type="dynamicToolCall",
        tool="ask",
        arguments={},
        status="failed",
        contentItems=content,
        success=False,
        durationMs=None,
    )
    assert closed["item"] == {
        "type": "tool",
        "server": "bb",
        "tool": "ask",
        "args": {},
        "result": "[image: u]",
        "error": "[image: u]",
    }
    assert closed["presentation"] == {
        "label": {"pending": "Asking", "completed": "Asked"},
        "icon": {"glyph": "Question"},
    }
    (bare,) = item(
        Translator(),
        "item/completed",
        type="dynamicToolCall",
        tool="x",
        arguments=None,
        status="failed",
        contentItems=None,
        success=False,
        durationMs=1,
    )
    assert bare["item"] == {
        "type": "tool",
        "tool": "x",
        "args": None,
        "error": "Dynamic tool call failed",
        "durationMs": 1,
    }


def test_declined_items_close_interrupted_and_denied() -> None:
    (closed,) = run(Translator(), "item/completed", threadId=THREAD, turnId=TURN, item=command("declined"))
    assert (closed["status"], closed["approvalStatus"]) == ("interrupted", "denied")
    assert list(closed) == ["kind", "key", "status", "approvalStatus", "item", "presentation", "providerTurnId"]


def test_web_fetch_image_view_plan_and_unknown_items() -> None:
    t = Translator()
    (fetch,) = item(
        t,
        "item/completed",
        type="webSearch",
        query="",
        action={"type": "findInPage", "url": "https://x", "pattern": "p"},
    )
    assert fetch["item"] == {"type": "webFetch", "url": "https://x", "pattern": "p"}
    assert (
        fetch["presentation"]["label"]["pending"] == "Fetching page" and fetch["presentation"]["title"] == "https://x"
    )
    (page,) = item(t, "item/completed", type="webSearch", query="", action={"type": "openPage", "url": "https://y"})
    assert page["item"] == {"type": "webFetch", "url": "https://y", "pattern": None}
    (no_url,) = item(t, "item/completed", type="webSearch", query="", action={"type": "openPage", "url": None})
    assert (no_url["kind"], no_url["vouchedTurn"], no_url["providerTurnId"]) == ("unhandled", True, TURN)
    (search,) = item(
        t, "item/completed", type="webSearch", query="c", action={"type": "search", "query": "b", "queries": ["a", "b"]}
    )
    assert search["item"]["queries"] == ["a", "b", "c"]
    (image,) = item(t, "item/completed", type="imageView", path="/tmp/shot.png")
    assert (
        image["item"] == {"type": "imageView", "path": "/tmp/shot.png"} and image["presentation"]["title"] == "shot.png"
    )
    (plan,) = item(t, "item/started", type="plan", text="1. x")
    assert plan["item"] == {"type": "plan", "text": "1. x"} and plan["presentation"]["icon"] == {"glyph": "ListTodo"}
    (review,) = item(t, "item/completed", type="enteredReviewMode", review="x")
    assert review["rawType"] == "item/completed" and review["providerTurnId"] == TURN
    assert item(t, "item/completed", type="userMessage", content=[{"type": "text", "text": "hi"}]) == []
    assert item(t, "item/completed", type="userMessage", content=[{"type": "audio"}])[0]["kind"] == "unhandled"


def test_collab_calls_with_receivers_are_delegations() -> None:
    t = Translator()
    fields = {
        "type": "collabAgentToolCall",
        "tool": "spawnAgent",
        "senderThreadId": THREAD,
        "receiverThreadIds": ["ag-1"],
        "model": None,
        "reasoningEffort": None,
    }
    (opened,) = item(
        t, "item/started", **fields, status="inProgress", prompt=" Go read ", agentsStates={"ag-1": "running"}
    )
    assert opened["item"] == {"type": "delegation", "childRef": "ag-1", "label": "Go read", "background": False}
    assert opened["presentation"] == {
        "label": {"pending": "Spawning agent", "completed": "Spawned agent"},
        "icon": {"glyph": "UserRound"},
        "title": "Go read",
    }
    (child,) = run(t, "turn/started", threadId="ag-1", turn={"id": "tu-child", "status": "inProgress"})
    assert child == {"kind": "turn.open", "providerTurnId": "tu-child", "parentRef": "i1"}
    (closed,) = item(
        t, "item/completed", **fields, status="completed", prompt=None, agentsStates={"ag-1": {"status": "done"}}
    )
    assert closed["item"] == {
        "type": "delegation",
        "childRef": "ag-1",
        "label": "Spawn agent",
        "background": False,
        "summary": 'ag-1: {"status":"done"}',
    }


# -- §3.11 raw command output ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "capture"),
    [
        ("Output:\nhello", "hello"),
        ("plain text", "plain text"),
        ("Chunk ID: 1\nWall time: 2\nOutput:\nhi\nthere", "hi\nthere"),
        ("Wall time: 2\nstray\nno marker", "Wall time: 2\nstray\nno marker"),
        ("Wall time: 2\nstray\nOutput:\nx", None),
        ("Chunk ID: 1\nWall time: 2", None),
    ],
)
def test_raw_output_header_parsing(text: str, capture: str | None) -> None:
    assert rawoutput.parse(text) == capture
    assert rawoutput.output_text([{"type": "input_text"}, {"type": "input_image"}]) == "[input_text]\n[input_image]"


def raw(t: Translator, item_fields: dict[str, Any]) -> list[dict[str, Any]]:
    return run(t, "rawResponseItem/completed", threadId=THREAD, turnId=TURN, item=item_fields)


def test_a_shell_close_waits_for_its_raw_output_and_is_repaired() -> None:
    t = Translator()
    assert raw(t, {"type": "function_call", "name": "exec_command", "call_id": "call_1", "arguments": "{}"}) == []
    assert run(t, "item/completed", threadId=THREAD, turnId=TURN, item=command()) == []
    (released,) = raw(
        t, {"type": "function_call_output", "call_id": "call_1", "output": "Chunk ID: a\r\nOutput:\r\nfile\r\n"}
    )
    assert released["item"] == {
        "type": "command",
        "command": "/bin/bash -lc 'ls -la'",
        "cwd": "/w",
        "exitCode": 0,
        "durationMs": 5,
        "aggregatedOutput": "file\n",
    }
    (again,) = run(t, "item/completed", threadId=THREAD, turnId=TURN, item=command(output="old"))
    assert list(again["item"]) == ["type", "command", "cwd", "aggregatedOutput", "exitCode", "durationMs"]
    assert again["item"]["aggregatedOutput"] == "file\n"


def test_withheld_closes_precede_the_boundary_and_empty_output_removes_the_key() -> None:
    t = Translator()
    raw(t, {"type": "function_call", "name": "bash", "call_id": "call_1"})
    raw(t, {"type": "function_call", "name": "bash", "call_id": "call_2"})
    raw(t, {"type": "function_call_output", "call_id": "call_2", "output": ""})
    (emptied,) = run(t, "item/completed", threadId=THREAD, turnId=TURN, item=command(output="x", item_id="call_2"))
    assert "aggregatedOutput" not in emptied["item"]
    assert run(t, "item/completed", threadId=THREAD, turnId=TURN, item=command()) == []
    kinds = [d["kind"] for d in run(t, "turn/completed", threadId=THREAD, turn={"id": TURN, "status": "completed"})]
    assert kinds == ["item.close", "turn.boundary"]
