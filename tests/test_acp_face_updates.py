"""The ACP face's pure parts: thread events as `session/update`s, stop reasons, history, config options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bbridge.acp_face import messages, options, permissions
from bbridge.acp_face.index import BadCursor, Record, page
from bbridge.acp_face.settings import read_settings
from bbridge.acp_face.updates import Updates, stop_reason, user_message
from bbridge.config_file import ConfigError

TURN = {"kind": "turn", "turnId": "t1"}
ECHOING = {"label": {"pending": "Echoing", "completed": "Echoed"}, "icon": {"glyph": "Sparkles"}}


def ev(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "scope": TURN, **fields}


def test_streamed_text_and_reasoning_are_chunks_and_a_streamed_item_is_not_repeated() -> None:
    updates = Updates()
    assert updates.take(ev("item/agentMessage/delta", itemId="i1", delta="he")) == [
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "he"}}
    ]
    assert updates.take(ev("item/reasoning/summaryTextDelta", itemId="i2", delta="hm")) == [
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}}
    ]
    assert updates.take(ev("item/completed", item={"type": "agentMessage", "id": "i1", "text": "he"})) == []
    whole = updates.take(ev("item/completed", item={"type": "agentMessage", "id": "i9", "text": "whole"}))
    assert whole == [{"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "whole"}}]
    thought = updates.take(
        ev("item/completed", item={"type": "reasoning", "id": "i8", "summary": ["a"], "content": ["b"]})
    )
    assert thought == [{"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "a\nb"}}]


def test_a_command_is_a_tool_call_whose_output_streams_whole_and_ends_with_its_status() -> None:
    updates = Updates()
    command = {"type": "commandExecution", "id": "c1", "command": "echo hi", "cwd": "/w", "status": "pending",
               "approvalStatus": None, "presentation": ECHOING}  # fmt: skip
    (start,) = updates.take(ev("item/started", item=command))
    assert start == {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Echoing: echo hi", "kind": "execute",
                     "status": "in_progress", "rawInput": {"command": "echo hi", "cwd": "/w"}}  # fmt: skip
    updates.take(ev("item/commandExecution/outputDelta", itemId="c1", delta="a"))
    (second,) = updates.take(ev("item/commandExecution/outputDelta", itemId="c1", delta="b"))
    assert second["content"] == [{"type": "content", "content": {"type": "text", "text": "ab"}}]
    failed = {**command, "status": "failed", "exitCode": 1}
    (end,) = updates.take(ev("item/completed", item=failed))
    assert end["status"] == "failed" and end["title"] == "Echoed: echo hi"
    assert end["content"] == [{"type": "content", "content": {"type": "text", "text": "ab"}}]


def test_a_file_change_is_an_edit_with_locations_and_diff_content() -> None:
    diff = "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n keep\n-old\n+new\n"
    change = {"type": "fileChange", "id": "f1", "status": "completed",
              "changes": [{"path": "/w/f.txt", "kind": "update", "diff": diff},
                          {"path": "/w/n.txt", "kind": "add", "diff": "--- /dev/null\n+++ b/n.txt\n+hi\n"}]}  # fmt: skip
    (start,) = Updates().take(ev("item/started", item={**change, "status": "pending"}))
    assert start["kind"] == "edit" and start["locations"] == [{"path": "/w/f.txt"}, {"path": "/w/n.txt"}]
    (end,) = Updates().take(ev("item/completed", item=change))
    assert end["content"] == [
        {"type": "diff", "path": "/w/f.txt", "oldText": "keep\nold\n", "newText": "keep\nnew\n"},
        {"type": "diff", "path": "/w/n.txt", "oldText": None, "newText": "hi\n"},
    ]


def test_searches_reads_and_tool_calls_get_their_kinds_and_progress_is_content() -> None:
    updates = Updates()
    kinds = {
        item["type"]: updates.take(ev("item/started", item=item))[0]["kind"]
        for item in (
            {"type": "search", "id": "s", "query": "x"},
            {"type": "fileRead", "id": "r", "path": "/w/a"},
            {"type": "webFetch", "id": "w", "url": "https://e"},
            {"type": "toolCall", "id": "t", "tool": "lookup", "arguments": {"q": 1}},
        )
    }
    assert kinds == {"search": "search", "fileRead": "read", "webFetch": "fetch", "toolCall": "other"}
    (progress,) = updates.take(ev("item/toolCall/progress", itemId="t", message="working"))
    assert progress["status"] == "in_progress" and progress["content"][0]["content"]["text"] == "working"
    (done,) = updates.take(ev("item/completed", item={"type": "toolCall", "id": "t", "tool": "lookup", "result": "ok"}))
    assert done["status"] == "completed" and done["content"][0]["content"]["text"] == "ok"
    assert updates.take(ev("item/started", item={"type": "contextCompaction", "id": "k"})) == []


def test_plans_are_plan_updates() -> None:
    updates = Updates()
    (streamed,) = updates.take(ev("item/plan/delta", itemId="p", delta="1. read\n2. write"))
    assert streamed == {"sessionUpdate": "plan", "entries": [
        {"content": "1. read", "priority": "medium", "status": "pending"},
        {"content": "2. write", "priority": "medium", "status": "pending"}]}  # fmt: skip
    steps = {
        "type": "planSteps",
        "id": "q",
        "steps": [{"step": "a", "status": "completed"}, {"step": "b", "status": "inProgress"}],
    }
    (plan,) = updates.take(ev("item/completed", item=steps))
    assert [e["status"] for e in plan["entries"]] == ["completed", "in_progress"]


def test_context_window_usage_is_a_usage_update() -> None:
    usage = {"usedTokens": 44, "modelContextWindow": 200000, "estimated": False}
    assert Updates().take(ev("thread/contextWindowUsage/updated", contextWindowUsage=usage)) == [
        {"sessionUpdate": "usage_update", "used": 44, "size": 200000}
    ]


def test_stop_reasons_come_from_the_turns_end() -> None:
    assert stop_reason({"status": "completed"}) == "end_turn"
    assert stop_reason({"status": "interrupted"}) == "cancelled"
    assert stop_reason({"status": "failed", "error": {"message": "x", "category": "max-output-tokens"}}) == "max_tokens"
    assert stop_reason({"status": "failed", "error": {"message": "x", "category": "policy"}}) == "refusal"
    assert stop_reason({"status": "failed", "error": {"message": "boom"}}) is None  # answered as an error


def test_history_inputs_and_prompt_blocks_round_trip() -> None:
    said = user_message([{"type": "text", "text": "hi", "mentions": []}, {"type": "localFile", "path": "/w/a b"}])
    assert said == [
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "hi"}},
        {
            "sessionUpdate": "user_message_chunk",
            "content": {"type": "resource_link", "uri": "file:///w/a b", "name": "/w/a b"},
        },
    ]
    blocks = [messages.ContentBlock(type="text", text="look"),
              messages.ContentBlock(type="resource_link", uri="file:///w/a%20b", name="a b"),
              messages.ContentBlock(type="resource", resource={"uri": "file:///w/c", "text": "body"}),
              messages.ContentBlock(type="image")]  # fmt: skip
    assert messages.turn_input(blocks) == [
        {"type": "text", "text": "look", "mentions": []},
        {"type": "localFile", "path": "/w/a b", "name": "a b"},
        {"type": "text", "text": '<context uri="file:///w/c">\nbody\n</context>', "mentions": []},
    ]


def test_config_options_follow_the_models_the_provider_lists() -> None:
    models = [
        {"id": "m1", "displayName": "One", "isDefault": False, "supportedReasoningEfforts": []},
        {"id": "m2", "displayName": "Two", "isDefault": True, "defaultReasoningEffort": "high",
         "supportedReasoningEfforts": [{"reasoningEffort": "low"}, {"reasoningEffort": "high"}]},
    ]  # fmt: skip
    choice = options.Choice("codex", models=models)
    choice.settle()
    assert (choice.model, choice.effort) == ("m2", "high")
    listed = {o["id"]: o for o in options.config_options(["codex", "echo"], choice)}
    assert [o["value"] for o in listed["provider"]["options"]] == ["codex", "echo"]
    assert listed["model"]["currentValue"] == "m2" and listed["model"]["category"] == "model"
    assert [o["value"] for o in listed["reasoning"]["options"]] == ["low", "high"]
    choice.model = "m1"
    choice.settle()
    assert choice.effort is None and "reasoning" not in {o["id"] for o in options.config_options(["codex"], choice)}
    assert choice.turn_options() == {"model": "m1"}


def test_approval_decisions_become_permission_options_and_back() -> None:
    payload = {"kind": "approval", "reason": None, "availableDecisions": ["allow_once", "allow_for_session", "deny"],
               "subject": {"kind": "command", "itemId": "c1", "command": "ls", "cwd": "/w", "actions": [],
                           "sessionGrant": {"network": None, "fileSystem": {"read": [], "write": ["/w"]}}}}  # fmt: skip
    offered = permissions.options("approval", payload)
    assert [(o["optionId"], o["kind"]) for o in offered] == [
        ("allow_once", "allow_once"), ("allow_for_session", "allow_always"), ("deny", "reject_once")]  # fmt: skip
    assert permissions.tool_call("req_1", "approval", payload) == {
        "toolCallId": "c1", "title": "command: ls", "kind": "execute", "status": "pending"}  # fmt: skip
    opened = {"requestId": "req_1", "kind": "approval"}
    session = permissions.result_of(opened, payload, {"outcome": "selected", "optionId": "allow_for_session"})
    assert session == {"decision": "allow_for_session", "grantedPermissions": payload["subject"]["sessionGrant"]}
    assert permissions.result_of(opened, payload, {"outcome": "cancelled"}) == {"decision": "deny"}


def test_a_single_choice_question_is_asked_as_options_and_any_other_gets_no_answer() -> None:
    one = {"questions": [{"id": "q", "prompt": "Which?", "multiSelect": False, "allowFreeText": False,
                          "options": [{"value": "a", "label": "A"}, {"value": "b", "label": "B"}]}]}  # fmt: skip
    assert [o["optionId"] for o in permissions.options("user_question", one)] == ["a", "b", permissions.SKIP]
    chosen = permissions.result_of({"kind": "user_question"}, one, {"outcome": "selected", "optionId": "b"})
    assert chosen == {"kind": "user_answer", "answers": {"q": {"selected": ["b"]}}}
    free = {"questions": [{"id": "q", "prompt": "Why?", "multiSelect": False, "allowFreeText": True}]}
    assert permissions.question_options(free) is None
    skipped = permissions.result_of(
        {"kind": "user_question"}, one, {"outcome": "selected", "optionId": permissions.SKIP}
    )
    assert skipped == permissions.NO_ANSWER


def test_the_acp_section_is_read_and_a_bad_key_named(tmp_path: Path) -> None:
    config = tmp_path / "bbridge.toml"
    config.write_text('[acp]\ndefault_provider = "codex"\n', encoding="utf-8")
    assert read_settings(config).default_provider == "codex"
    assert read_settings(None).default_provider is None
    config.write_text("[acp]\ndefault_provider = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"acp: Expected `str \| null`, got `int` - at `\$.default_provider`"):
        read_settings(config)


def test_session_list_pages_newest_first_and_a_session_updated_meanwhile_shifts_nothing() -> None:
    records = [Record(sessionId=f"s{n}", cwd="/w", providerId="echo", updatedAt=float(n % 3)) for n in range(6)]
    first, cursor = page(records, None, size=2)  # newest first, ties by id: s2 s5 | s1 s4 | s0 s3
    assert [r.sessionId for r in first] == ["s2", "s5"] and cursor is not None
    records[0].updatedAt = 9.0  # s0 is prompted between the pages: the next pages neither repeat nor skip
    second, cursor = page(records, cursor, size=2)
    assert [r.sessionId for r in second] == ["s1", "s4"] and cursor is not None
    third, last = page(records, cursor, size=2)
    assert [r.sessionId for r in third] == ["s3"] and last is None
    assert page(records, None, size=6)[1] is None
    with pytest.raises(BadCursor):
        page(records, "not-a-cursor", size=2)
