"""The ACP bridge's translation layer, unit by unit: updates → deltas, tool shapes, permissions, wire readers.

The property tests feed arbitrary update streams through the translator and the real assembler: every batch
validates, and a turn always settles with every item it opened closed.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from bbridge.core import grammar as g
from bbridge.core.assembler import Assembler
from bbridge.core.items import is_js_blank
from bbridge.kit import UsageMeter, encode_deltas, tokens
from bbridge.wire import interactions
from bridges.acp import approvals, messages, tool_shapes
from bridges.acp.translate import Translator, prompt_usage

THREAD = "thr_acp"


def tool_call(call_id: str = "c1", **fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call", "toolCallId": call_id, **fields}


def tool_update(call_id: str = "c1", **fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call_update", "toolCallId": call_id, **fields}


def chunk(text: str, kind: str = "agent_message_chunk") -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def kinds(deltas: list[g.Delta]) -> list[str]:
    return [str(type(d).__struct_config__.tag) for d in deltas]


# -- streams -------------------------------------------------------------------


def test_message_chunk_closes_the_thought_stream_and_carries_its_fallback() -> None:
    deltas = Translator(THREAD).update(chunk("hi"))
    assert kinds(deltas) == ["item.textClose", "item.textDelta"]
    close, delta = deltas
    assert isinstance(close, g.ItemTextClose) and close.channel == "reasoningText"
    assert isinstance(delta, g.ItemTextDelta) and (delta.channel, delta.text) == ("agentMessage", "hi")
    assert isinstance(delta.noTurnFallback, g.NoTurnFallback)
    assert delta.noTurnFallback.rawType == "acp/update:agent_message_chunk"
    assert delta.noTurnFallback.raw.params == {"threadId": THREAD, "update": chunk("hi")}


def test_thought_chunk_streams_reasoning_text() -> None:
    (delta,) = Translator(THREAD).update(chunk("hmm", "agent_thought_chunk"))
    assert isinstance(delta, g.ItemTextDelta) and delta.channel == "reasoningText" and delta.key.channel == "thought"


def test_a_chunk_without_text_is_reported_not_dropped() -> None:
    (delta,) = Translator(THREAD).update({"sessionUpdate": "agent_message_chunk", "content": {"type": "image"}})
    assert isinstance(delta, g.Unhandled) and delta.onlyIfNoTurn is True and delta.vouchedTurn is False


# -- tool calls ------------------------------------------------------------------


def test_read_without_a_path_stays_a_tool_presenting_as_its_kind() -> None:
    deltas = Translator(THREAD).update(tool_call(title="Read File", kind="read", status="pending", rawInput={}))
    assert kinds(deltas) == ["item.textClose", "item.textClose", "item.open"]
    opened = deltas[-1]
    assert isinstance(opened, g.ItemOpen) and opened.item == g.ToolShape(tool="read")
    assert opened.presentation == g.Presentation(
        label=g.Label(pending="Reading file", completed="Read file"), icon=g.Icon(glyph="FileText"), title="Read File"
    )


def test_kinds_map_to_core_shapes_when_the_agent_filled_them() -> None:
    def shape(**fields: Any) -> g.ItemShape:
        return tool_shapes.classify(tool_call(**fields)).item

    assert shape(kind="read", locations=[{"path": "/w/a.txt"}]) == g.FileReadShape(path="/w/a.txt")
    assert shape(kind="read", title="Read `/abs/b.py`") == g.FileReadShape(path="/abs/b.py")
    assert shape(kind="execute", title="`ls`", rawInput={"command": "ls -la"}) == g.CommandShape(
        command="ls -la", cwd=""
    )
    assert shape(kind="execute", title="`ls`") == g.CommandShape(command="`ls`", cwd="")
    assert shape(kind="search", rawInput={"pattern": "foo", "path": "/w"}) == g.SearchShape(
        mode="content", query="foo", path="/w"
    )
    assert shape(kind="search", rawInput={"glob": "*.py"}) == g.SearchShape(mode="path", query="*.py")
    assert shape(kind="fetch", rawInput={"url": "https://x.test/a"}) == g.WebFetchShape(
        url="https://x.test/a", pattern=None
    )
    assert shape(kind="fetch", title="Fetch https://x.test/b") == g.WebFetchShape(url="https://x.test/b", pattern=None)
    assert shape(kind="think", rawInput={"thought": "why"}) == g.ReasoningShape(summary=[], content=["why"])
    assert shape(kind="edit", locations=[{"path": "/w/c"}]) == g.FileChangeShape(
        changes=[g.FileChangeEntry(path="/w/c", kind="update")]
    )
    assert shape(kind="move", title="mv") == g.ToolShape(tool="move")
    assert shape() == g.ToolShape(tool="tool")


def test_command_headline_drops_code_ticks() -> None:
    shaped = tool_shapes.classify(tool_call(kind="execute", title="`sleep 2`", rawInput={"command": "sleep 2"}))
    assert shaped.presentation.title == "sleep 2"


def test_an_update_merges_into_its_call_and_a_diff_reclassifies_it_at_the_close() -> None:
    translator = Translator(THREAD)
    translator.update(tool_call(title="Edit File", kind="edit", status="pending", rawInput={}))
    assert kinds(translator.update(tool_update(status="in_progress"))) == ["unhandled"]
    diff = {"type": "diff", "path": "/w/m.js", "oldText": "a\n", "newText": "b\n"}
    (close,) = translator.update(tool_update(status="completed", content=[diff]))
    assert isinstance(close, g.ItemClose) and close.status == "completed" and close.exitCode == 0
    assert close.item == g.FileChangeShape(
        changes=[g.FileChangeEntry(path="/w/m.js", kind="update", oldText="a\n", newText="b\n")]
    )
    assert isinstance(close.presentation, g.Presentation) and close.presentation.title == "m.js"
    assert translator.calls == {}


def test_output_text_rides_the_close_and_a_failure_exits_one() -> None:
    translator = Translator(THREAD)
    translator.update(tool_call(kind="execute", rawInput={"command": "false"}))
    (close,) = translator.update(tool_update(status="failed", rawOutput={"exitCode": 1, "stdout": ""}))
    assert isinstance(close, g.ItemClose) and close.status == "failed" and close.exitCode == 1
    assert close.resultText == close.aggregatedOutput == '{"exitCode":1,"stdout":""}'


def test_progress_streams_for_tools_but_not_for_commands() -> None:
    translator = Translator(THREAD)
    translator.update(tool_call("t", kind="other", title="MCP: tool"))
    translator.update(tool_call("x", kind="execute", rawInput={"command": "ls"}))
    text = [{"type": "content", "content": {"type": "text", "text": "working"}}]
    (progress,) = translator.update(tool_update("t", status="in_progress", content=text))
    assert isinstance(progress, g.ItemProgress) and progress.message == "working"
    assert kinds(translator.update(tool_update("x", status="in_progress", content=text))) == ["unhandled"]


def test_a_call_announced_settled_closes_without_opening() -> None:
    deltas = Translator(THREAD).update(tool_call(kind="other", status="completed", rawOutput="done"))
    assert kinds(deltas) == ["item.textClose", "item.textClose", "item.close"]
    assert isinstance(deltas[-1], g.ItemClose) and deltas[-1].resultText == "done"


def test_an_invalid_tool_call_is_reported() -> None:
    (delta,) = Translator(THREAD).update({"sessionUpdate": "tool_call", "title": "no id"})
    assert isinstance(delta, g.Unhandled) and delta.rawType == "acp/update:tool_call"


# -- other updates ---------------------------------------------------------------


def test_plan_is_a_settled_plan_steps_snapshot() -> None:
    entries = [
        {"content": "read", "status": "completed"},
        {"content": "edit", "status": "in_progress"},
        {"content": "test"},
    ]
    (close,) = Translator(THREAD).update({"sessionUpdate": "plan", "entries": entries})
    assert isinstance(close, g.ItemClose) and close.key == g.ItemKey(channel="planSteps")
    assert close.item == g.PlanStepsShape(
        steps=[
            g.PlanStep(step="read", status="completed"),
            g.PlanStep(step="edit", status="active"),
            g.PlanStep(step="test"),
        ]
    )
    assert isinstance(close.presentation, g.Presentation)
    assert (close.presentation.title, close.presentation.suppress) == ("edit", True)


def test_usage_title_noise_and_unknown_updates() -> None:
    translator = Translator(THREAD)
    assert translator.update({"sessionUpdate": "usage_update", "used": 10, "size": 100}) == [
        g.ContextWindow(used=10, size=100, estimated=False, attach="open")
    ]
    assert translator.update({"sessionUpdate": "session_info_update", "title": "Fix it"}) == [
        g.ThreadName(name="Fix it")
    ]
    (noise,) = translator.update({"sessionUpdate": "available_commands_update", "availableCommands": []})
    assert isinstance(noise, g.Unhandled) and noise.onlyIfNoTurn is True
    (unknown,) = translator.update({"future": 1, "sessionUpdate": "brand_new"})
    assert isinstance(unknown, g.Unhandled) and unknown.vouchedTurn is True and unknown.onlyIfNoTurn is UNSET
    assert unknown.rawType == "acp/update:brand_new"
    assert list(unknown.raw.params["update"]) == ["sessionUpdate", "future"]


# -- turns -----------------------------------------------------------------------


def test_turn_end_settles_streams_then_open_calls_oldest_first() -> None:
    translator = Translator(THREAD)
    translator.update(tool_call("a", kind="execute", rawInput={"command": "sleep 9"}))
    translator.update(tool_call("b", kind="other"))
    deltas = translator.turn_completed("cancelled")
    assert kinds(deltas) == ["item.textClose", "item.textClose", "item.close", "item.close", "turn.boundary"]
    assert [d.key.providerItemId for d in deltas if isinstance(d, g.ItemClose)] == ["a", "b"]
    assert all(d.status == "interrupted" for d in deltas if isinstance(d, g.ItemClose))
    assert deltas[-1] == g.TurnBoundary(status="interrupted", claimIfIdle=True)


def test_stop_reasons_map_to_turn_statuses() -> None:
    assert Translator(THREAD).turn_completed("end_turn")[-1] == g.TurnBoundary(status="completed", claimIfIdle=True)
    failed = Translator(THREAD).turn_completed("refusal")[-1]
    assert failed == g.TurnBoundary(
        status="failed", error=g.BoundaryError(message="Agent stopped the turn: refusal"), claimIfIdle=True
    )


def test_prompt_usage_is_the_turns_last_usage() -> None:
    usage = {"totalTokens": 30, "inputTokens": 20, "outputTokens": 10, "cachedReadTokens": 5, "thoughtTokens": 2}
    assert prompt_usage({"stopReason": "end_turn", "usage": usage}) == g.TokenBreakdown(
        totalTokens=30, inputTokens=20, cachedInputTokens=5, outputTokens=10, reasoningOutputTokens=2
    )
    assert prompt_usage({"stopReason": "end_turn"}) is None
    assert prompt_usage({"usage": {"totalTokens": 1}}) is None
    meter = UsageMeter()
    deltas = Translator(THREAD).turn_completed("end_turn", meter.turn(prompt_usage({"usage": usage}) or tokens()))
    assert kinds(deltas)[-2:] == ["usage", "turn.boundary"]


def test_compaction_reports_compacted_only_when_completed() -> None:
    translator = Translator(THREAD)
    assert kinds(translator.compaction_started()) == ["turn.open", "item.open"]
    assert "context.compacted" in kinds(translator.compaction_completed("completed"))
    assert "context.compacted" not in kinds(translator.compaction_completed("failed", "nope"))


# -- permissions -----------------------------------------------------------------

OPTIONS = [
    {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Allow always", "kind": "allow_always"},
    {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
]


def test_decisions_and_outcomes_use_the_agents_own_options() -> None:
    assert approvals.decisions(OPTIONS) == ["allow_once", "allow_for_session", "deny"]
    assert approvals.decisions([{"optionId": "x", "name": "x", "kind": "allow_always"}]) == ["allow_for_session"]
    assert approvals.outcome(OPTIONS, "deny") == {"outcome": {"outcome": "selected", "optionId": "reject-once"}}
    assert approvals.outcome(OPTIONS[:1], "allow_for_session")["outcome"]["optionId"] == "allow-once"
    assert approvals.outcome(OPTIONS[:2], "deny") == approvals.CANCELLED
    assert approvals.outcome(OPTIONS, None) == approvals.CANCELLED


def test_permission_subjects() -> None:
    command = approvals.payload({"toolCallId": "c", "title": "`touch a`", "kind": "execute"}, OPTIONS, None)
    assert command.subject == interactions.CommandSubject(
        itemId="c",
        command="`touch a`",
        cwd=None,
        actions=[interactions.UnknownAction(command="`touch a`")],
        sessionGrant=None,
    )
    edit = {"toolCallId": "e", "kind": "edit", "locations": [{"path": "/w/f.txt"}, {"path": "/w"}]}
    change = approvals.payload(edit, OPTIONS, None).subject
    assert isinstance(change, interactions.FileChangeSubject) and change.writeScope == "/w"
    started = tool_call("o", kind="other", title="MCP: tool")
    tool = approvals.payload({"toolCallId": "o", "kind": "other"}, OPTIONS, started).subject
    assert isinstance(tool, interactions.ToolUseSubject) and tool.tool == "other"
    assert tool.presentation.title == "MCP: tool"
    bare = approvals.payload(None, OPTIONS[:1], None)
    assert isinstance(bare.subject, interactions.ToolUseSubject) and bare.subject.itemId == "acp-permission"
    assert bare.availableDecisions == ["allow_once"]


# -- message readers ----------------------------------------------------------------


def test_result_text_reads_like_the_reference() -> None:
    assert messages.result_text({"content": "x"}) == '{"content":"x"}'
    assert (
        messages.result_text({"content": [{"type": "text", "text": "a"}, {"type": "image", "path": "/i.png"}]})
        == "a\n[image: /i.png]"
    )
    assert messages.result_text([{"type": "tool_reference", "tool_name": "Grep"}]) == "Matched tools: Grep"
    assert (
        messages.result_text(3.0) == "3" and messages.result_text(True) == "true" and messages.result_text(None) == ""
    )
    event = tool_update(rawOutput="see data:image/png;base64,AAAA end")
    assert messages.output_text(event) == "see [image] end"


def test_result_text_prints_numbers_as_javascript_does() -> None:
    """Numbers in a tool result read as `JSON.stringify` prints them (the core's `js.stringify`), never as
    Python's integer expansion of a large double."""
    assert messages.result_text({"n": [1e21, 2.0, 1e-7]}) == '{"n":[1e+21,2,1e-7]}'
    assert messages.result_text(1e300) == "1e+300"


# -- properties --------------------------------------------------------------------

ids = st.sampled_from(["c1", "c2", "c3"])
texts = st.text(min_size=1, max_size=8)
updates = st.one_of(
    texts.map(chunk),
    texts.map(lambda t: chunk(t, "agent_thought_chunk")),
    st.builds(
        tool_call,
        ids,
        kind=st.sampled_from(sorted(messages.TOOL_KINDS)),
        status=st.sampled_from(sorted(messages.TOOL_STATUSES)),
        title=texts,
        rawInput=st.one_of(st.just({}), st.builds(lambda c: {"command": c}, texts)),
    ),
    st.builds(tool_update, ids, status=st.sampled_from(sorted(messages.TOOL_STATUSES)), rawOutput=texts),
    st.builds(lambda e: {"sessionUpdate": "plan", "entries": [{"content": c} for c in e]}, st.lists(texts, max_size=3)),
    st.just({"sessionUpdate": "usage_update", "used": 5, "size": 50}),
    st.builds(lambda k: {"sessionUpdate": k}, texts),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(updates, max_size=25), st.sampled_from(sorted(messages.STOP_REASONS)))
def test_any_update_stream_validates_and_settles_every_item(stream: list[dict[str, Any]], stop_reason: str) -> None:
    translator = Translator(THREAD)
    assembler = Assembler("acp-test", "da00000000", progress_throttle_ms=500, text_delta_flush_ms=0)
    batches = [
        translator.turn_started(),
        *(translator.update(u) for u in stream),
        translator.turn_completed(stop_reason),
    ]
    events = []
    for batch in batches:
        if batch:
            params = g.decode_params(encode_deltas(THREAD, batch))  # raises if the grammar rejects a delta
            events += assembler.assemble(THREAD, params.deltas, 0)
    types = [e["type"] for e in events]
    assert types.count("turn/started") == 1 and types[-1] == "turn/completed"
    started = {msgspec.to_builtins(e["item"])["id"] for e in events if e["type"] == "item/started"}
    settled = {msgspec.to_builtins(e["item"])["id"] for e in events if e["type"] == "item/completed"}
    streamed: dict[str, str] = {}
    for event in events:
        if event["type"].endswith("Delta") or event["type"].endswith("/delta"):
            streamed[event["itemId"]] = streamed.get(event["itemId"], "") + event["delta"]
    # a text stream that only ever carried whitespace completes nothing (assembler.md §8.5): released, not settled
    blank = {item for item, text in streamed.items() if is_js_blank(text)}
    assert started - blank <= settled
