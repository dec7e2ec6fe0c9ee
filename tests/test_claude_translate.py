"""The Claude Code translator, rule by rule, for what no recorded cell exercises (spec §10.1).

The recorded cells prove the common path byte for byte (`test_translate_parity.py`); these pin the code-only
rules of §4: retries, hard rate-limit rejections, model fallbacks, late-drain suppression, task families and
plans, every tool shape, the JavaScript string semantics. Every batch is encoded through the grammar check.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from bbridge.core import grammar as g
from bbridge.core import js
from bridges.claude_code import child, plans, tool_items
from bridges.claude_code import presentation as p
from bridges.claude_code.outcomes import context_hint, error_info
from bridges.claude_code.translate import Translator, delta_params

THREAD = "thr_claude"
CREQ = "creq_abcdefghij"


def out(deltas: list[g.Delta]) -> list[dict[str, Any]]:
    """The deltas as the wire carries them (grammar-checked)."""
    encoded: list[dict[str, Any]] = json.loads(delta_params(THREAD, deltas))["deltas"]
    return encoded


def kinds(deltas: list[g.Delta]) -> list[str]:
    return [d["kind"] for d in out(deltas)]


def turn() -> Translator:
    """A translator with an accepted input and an open turn."""
    t = Translator(THREAD, "claude-opus-5[1m]")
    t.input_accepted(CREQ)
    t.message(assistant([{"type": "text", "text": "hi"}]))
    return t


def assistant(content: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"type": "assistant", "message": {"role": "assistant", "content": content}, "uuid": "u-1", **extra}


def tool_use(call_id: str, name: str, tool_input: Any) -> dict[str, Any]:
    return assistant([{"type": "tool_use", "id": call_id, "name": name, "input": tool_input}])


def tool_result(call_id: str, content: Any = "ok", **block: Any) -> dict[str, Any]:
    result = {"type": "tool_result", "tool_use_id": call_id, "content": content, **block}
    return {"type": "user", "message": {"role": "user", "content": [result]}}


def result(**fields: Any) -> dict[str, Any]:
    return {"type": "result", "subtype": "success", "is_error": False, **fields}


# -- JavaScript semantics (§8.3) ---------------------------------------------------


def test_js_trim_uses_the_ecmascript_whitespace_set() -> None:
    assert js.trim("\ufeff a \u3000") == "a"
    assert js.trim("\x85a\x1c") == "\x85a\x1c"


def test_cuts_count_utf16_units_and_keep_a_lone_high_surrogate() -> None:
    assert js.cut("a😀b", 2) == "a\ud83d"
    assert js.limit("x" * 161, 160) == "x" * 159 + "…"
    assert js.limit("x" * 160, 160) == "x" * 160


def test_title_is_the_trimmed_first_line() -> None:
    assert p.title("  cat a\r\nmore ") == "cat a"
    assert p.title(" \n second") == "second"
    assert p.title(" \t ") is None
    assert p.title("é" * 200) == "é" * 159 + "…"


def test_numbers_print_as_javascript_does() -> None:
    assert js.number_text(3.0) == "3" and js.number_text(2.5) == "2.5"
    assert js.number_text(1e21) == "1e+21" and js.number_text(float("-inf")) == "-Infinity"
    assert js.parse('{"a":1.0,"b":[2.50]}') == {"a": 1, "b": [2.5]}


# JSON text → `JSON.stringify(JSON.parse(text))`, as Node 20 prints it (A§16.1, spec §8.1)
JS_ROUND_TRIPS = {
    "1e21": "1e+21",
    "1.5e300": "1.5e+300",
    "1e-7": "1e-7",
    "1.5e-5": "0.000015",
    "123e-20": "1.23e-18",
    "1e20": "100000000000000000000",
    "-0": "0",
    "1E400": "null",
    "5e-324": "5e-324",
    "9007199254740993": "9007199254740992",
    "[-9007199254740993]": "[-9007199254740992]",
    "12345678901234567890123": "1.2345678901234568e+22",
    r'"\ud800x"': r'"\ud800x"',
    r'"\udc00\ud83d\ude00"': '"\\udc00😀"',
    '"\\u007f\\u2028\\u0001/"': '"\x7f\u2028\\u0001/"',
    '{"b":1,"a":2,"b":3}': '{"b":3,"a":2}',
    '{"b":1,"10":2,"2":3,"01":4,"4294967295":5,"4294967294":6}': '{"2":3,"10":2,"4294967294":6,"b":1,"01":4,"4294967295":5}',
    r'{"x":"\ud800","10":1,"2":2}': r'{"2":2,"10":1,"x":"\ud800"}',
}


@pytest.mark.parametrize(("text", "expected"), JS_ROUND_TRIPS.items())
def test_parse_then_stringify_is_javascripts_round_trip(text: str, expected: str) -> None:
    assert js.stringify(js.parse(text)) == expected
    assert js.stringify(js.parse(text.encode("utf-8", "surrogatepass"))) == expected


@pytest.mark.parametrize("text", ["this is { not json", "NaN", "[Infinity]", '{"a":1', '"\\ud800'])
def test_parse_refuses_what_json_parse_refuses(text: str) -> None:
    with pytest.raises(msgspec.DecodeError):
        js.parse(text)


def test_raw_sdk_messages_reach_the_wire_as_javascript_wrote_them() -> None:
    """The child's line → the raw payload of an `unhandled` delta: member order, number spellings and a lone
    surrogate survive exactly (§4.3); msgspec alone would print `1e21`, keep 2^53+1 and fail on the surrogate."""
    t = Translator(THREAD, "claude-opus-5[1m]")
    t.input_accepted(CREQ)
    line = rb'{"type":"brand_new","n":1e21,"big":9007199254740993,"s":"a\ud800","2":1,"1":0}'
    wire = delta_params(THREAD, t.message(js.parse(line)))
    assert b'"message":{"1":0,"2":1,"type":"brand_new","n":1e+21,"big":9007199254740992,"s":"a\\ud800"}' in wire


def test_child_lines_are_written_as_javascript_would() -> None:
    """Tool inputs go back to the CLI verbatim (`updatedInput`), so child lines follow §8.1 too."""
    assert child.encode({"input": {"x": 1e21, "s": "\ud800/é"}}) == '{"input":{"x":1e+21,"s":"\\ud800/é"}}\n'.encode()


def test_presentation_writes_suppress_before_the_title() -> None:
    delta = g.ItemOpen(
        key=g.ItemKey(providerItemId="t1"), item=g.ToolShape(tool="x"), presentation=p.builtin("TaskGet", {})
    )
    shown = out([delta])[0]["presentation"]
    assert list(shown) == ["label", "icon", "suppress"]
    with_title = out([delta.__class__(key=delta.key, item=delta.item, presentation=p.builtin("LS", {"path": "/a"}))])
    assert list(with_title[0]["presentation"]) == ["label", "icon", "title"]
    ordered = p.builtin("ToolSearch", {"query": "q"})
    encoded = out([g.ItemOpen(key=g.ItemKey(providerItemId="t"), item=g.ToolShape(tool="t"), presentation=ordered)])
    assert list(encoded[0]["presentation"]) == ["label", "icon", "suppress", "title"]


# -- tool classification (§4.5.1–4.5.3) ------------------------------------------------


def shape(name: str, tool_input: Any) -> dict[str, Any]:
    classified = tool_items.classify(name, "toolu_1", tool_input)
    delta = g.ItemOpen(
        key=g.ItemKey(providerItemId="toolu_1"), item=classified.item, presentation=classified.presentation
    )
    return out([delta])[0]


@pytest.mark.parametrize(
    ("name", "tool_input", "item", "label", "title"),
    [
        ("Read", {"file_path": "/a/b.py"}, {"type": "fileRead", "path": "/a/b.py"}, "Reading file", "b.py"),
        ("Grep", {"pattern": "foo", "path": "src"}, {"type": "search", "mode": "content", "query": "foo", "path": "src"}, "Searching files", "foo"),
        ("Glob", {"pattern": "*.py", "path": ""}, {"type": "search", "mode": "path", "query": "*.py"}, "Finding files", "*.py"),
        ("Bash", {"command": "sleep 9", "run_in_background": True}, {"type": "command", "command": "sleep 9", "cwd": ""}, "Starting background command", "sleep 9"),
        ("WebSearch", {"query": "q"}, {"type": "webSearch", "queries": ["q"]}, "Searching the web", "q"),
        ("WebFetch", {"url": "https://x"}, {"type": "webFetch", "url": "https://x", "prompt": None, "pattern": None}, "Fetching page", "https://x"),
        ("mcp__bb-bridge__ask", {"q": 1}, {"type": "tool", "tool": "ask", "server": "bb", "args": {"q": 1}}, "Running ask", None),
        ("mcp__github__list__prs", [1], {"type": "tool", "tool": "list__prs", "server": "github"}, "Running list__prs", "github"),
        ("Bash", {"command": ""}, {"type": "tool", "tool": "Bash", "args": {"command": ""}}, "Running Bash", None),
        ("Frobnicate", "x", {"type": "tool", "tool": "Frobnicate"}, "Running Frobnicate", None),
    ],
)  # fmt: skip
def test_tool_shapes(name: str, tool_input: Any, item: dict[str, Any], label: str, title: str | None) -> None:
    opened = shape(name, tool_input)
    assert opened["item"] == item
    assert opened["presentation"]["label"]["pending"] == label
    assert opened["presentation"].get("title") == title


def test_edit_write_and_their_fallbacks() -> None:
    edit = shape("Edit", {"file_path": "/w/a.js", "old_string": "a", "new_string": "b"})
    assert edit["item"] == {
        "type": "fileChange",
        "changes": [{"path": "/w/a.js", "kind": "update", "oldText": "a", "newText": "b"}],
    }
    assert edit["presentation"]["title"] == "a.js"
    write = shape("Write", {"file_path": "/w/n.txt", "content": "x"})
    assert write["item"]["changes"] == [{"path": "/w/n.txt", "kind": "add", "newText": "x"}]
    assert write["presentation"]["label"] == {"pending": "Writing file", "completed": "Wrote file"}
    pathless = shape("Edit", {"old_string": "a"})
    assert pathless["item"] == {"type": "tool", "tool": "Edit", "args": {"old_string": "a"}}
    assert "title" not in pathless["presentation"] and pathless["presentation"]["icon"] == {"glyph": "EditFile"}
    assert shape("Edit", {"file_path": 3})["presentation"]["label"]["pending"] == "Running Edit"


def test_multi_edit_and_notebook_edit() -> None:
    multi = shape("MultiEdit", {"file_path": "a", "edits": [{"old_string": "1", "new_string": "2"}] * 2})
    assert len(multi["item"]["changes"]) == 2
    broken = shape("MultiEdit", {"file_path": "a", "edits": "no", "old_string": "x"})
    assert broken["item"]["changes"] == [{"path": "a", "kind": "update", "oldText": "x"}]
    notebook = shape("NotebookEdit", {"notebook_path": "/n.ipynb", "new_source": "print()"})
    assert notebook["item"]["changes"] == [{"path": "/n.ipynb", "kind": "update", "newText": "print()"}]
    assert notebook["presentation"]["label"]["pending"] == "Editing notebook"


def test_delegation_label_and_detail() -> None:
    opened = shape(
        "Task", {"prompt": "  first line\nsecond", "subagent_type": "Plan", "model": "opus", "run_in_background": True}
    )
    assert opened["item"] == {"type": "delegation", "childRef": "toolu_1", "label": "first line", "background": True}
    assert opened["presentation"]["label"]["pending"] == "Launching subagent"
    assert opened["presentation"]["detail"] == "Plan agent · model opus"


def test_result_text_extractor() -> None:
    assert (
        tool_items.result_text(
            [{"type": "tool_reference", "tool_name": "A"}, {"type": "tool_reference", "tool_name": "B"}]
        )
        == "Matched tools: A, B"
    )
    assert (
        tool_items.result_text([{"type": "text", "text": "a"}, {"type": "image", "path": "/p"}, {"type": "x"}, 3])
        == "a\n[image: /p]\n[x]"
    )
    assert tool_items.result_text({"content": [{"type": "text", "text": "t"}]}) == "t"
    assert tool_items.result_text({"a": "é/"}) == '{"a":"é/"}'
    assert tool_items.result_text(True) == "true"


def test_command_output_prefers_the_blocks_structured_result() -> None:
    assert tool_items.command_output("text", {"stdout": "out", "stderr": "err"}) == "out\nerr"
    assert tool_items.command_output("text", {"stdout": "out\n", "stderr": "err"}) == "out\nerr"
    assert tool_items.command_output("text", {"stdout": "", "stderr": ""}) == "text"
    assert tool_items.command_output(" (Bash completed with no output) ", None) is None
    assert tool_items.command_output("c", "(Bash completed with no output)") == "c"


def test_stripped_summary_drops_bookkeeping_lines() -> None:
    assert tool_items.stripped_summary("answer  \nagentId: a1\n<usage>x</usage>\n") == "answer"


# -- results and the mirror (§4.1, §4.7) ---------------------------------------------


def test_result_without_open_turn_or_queued_input_is_silent() -> None:
    assert Translator(THREAD).message(result()) == []


def test_non_human_result_does_not_claim_a_queued_input() -> None:
    t = Translator(THREAD)
    t.input_accepted(CREQ)
    assert t.message(result(origin={"kind": "background"})) == []
    assert kinds(t.message(result(origin={"kind": "human"}))) == ["turn.open", "turn.boundary"]


def test_failed_result_errors_then_suppresses_the_late_drain() -> None:
    t = turn()
    deltas = out(t.message(result(subtype="error_max_turns", is_error=False)))
    assert deltas[-2] == {
        "kind": "provider.error",
        "message": "Provider error",
        "detail": "Claude Code reached the maximum number of turns.",
        "errorInfo": {"category": "max-turns", "providerCode": "error_max_turns", "httpStatusCode": None},
    }
    assert deltas[-1] == {"kind": "turn.boundary", "status": "failed", "providerCheckpointId": "u-1"}
    late = {
        "type": "stream_event",
        "event": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}},
    }
    assert t.message(late) == []
    assert t.message(assistant([{"type": "text", "text": "late"}])) == []
    t.input_accepted(CREQ)
    assert kinds(t.message(late)) == ["turn.open", "item.textDelta"]


def test_failed_result_detail_from_errors_and_http_status() -> None:
    t = turn()
    deltas = out(t.message(result(subtype="error_during_execution", errors=[" a ", " ", "b"], api_error_status=503)))
    error = next(d for d in deltas if d["kind"] == "provider.error")
    assert error["detail"] == "a\nb"
    assert error["errorInfo"] == {
        "category": "internal",
        "providerCode": "error_during_execution",
        "httpStatusCode": 503,
    }


def test_usage_and_context_window_fall_back_to_the_hint() -> None:
    t = turn()
    t.message(
        assistant(
            [{"type": "text", "text": "x"}],
            message={"role": "assistant", "content": [], "usage": {"input_tokens": 5, "cache_read_input_tokens": 2}},
        )
    )
    deltas = out(t.message(result(usage={"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": -4})))
    assert deltas[1] == {"kind": "contextWindow", "used": 7, "size": 1000000, "estimated": True, "attach": "open"}
    assert deltas[2]["last"] == {
        "totalTokens": 3,
        "inputTokens": 1,
        "cachedInputTokens": 0,
        "outputTokens": 2,
        "reasoningOutputTokens": 0,
    }
    assert deltas[2]["modelContextWindow"] is None


def test_context_hints() -> None:
    assert (context_hint("sonnet[1m]"), context_hint("default"), context_hint("haiku"), context_hint(None)) == (
        1000000,
        None,
        200000,
        None,
    )


def test_no_response_synthetic_settles_a_turn_only_with_work() -> None:
    zero = {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0}
    inner = {
        "model": "<synthetic>",
        "role": "assistant",
        "stop_reason": "stop_sequence",
        "stop_sequence": "",
        "usage": zero,
        "content": [{"type": "text", "text": "No response requested."}],
    }
    message = {"type": "assistant", "message": inner, "uuid": "syn"}
    assert Translator(THREAD).message(message) == []
    t = Translator(THREAD)
    t.input_accepted(CREQ)
    assert out(t.message(message)) == [
        {"kind": "turn.open"},
        {"kind": "turn.boundary", "status": "completed", "providerCheckpointId": "syn"},
    ]


def test_tool_result_without_open_turn_is_unhandled_threadid_first() -> None:
    (delta,) = out(Translator(THREAD).message(tool_result("toolu_x")))
    assert delta["kind"] == "unhandled" and delta["rawType"] == "sdk/user:tool_result"
    assert list(delta["raw"]["params"]) == ["threadId", "message"]


def test_result_after_a_new_turn_uses_the_fallback_classification() -> None:
    t = turn()
    t.message(tool_use("toolu_b", "Bash", {"command": "ls"}))
    t.message(result())
    t.input_accepted(CREQ)
    t.message(assistant([{"type": "text", "text": "again"}]))
    (close,) = out(t.message(tool_result("toolu_b", "(Bash completed with no output)", tool_name="Bash")))
    assert close["item"] == {"type": "command", "command": "", "cwd": ""} and "aggregatedOutput" not in close
    assert close["exitCode"] == 0 and "title" not in close["presentation"]


def test_sidechain_keys_carry_the_parent_ref() -> None:
    t = turn()
    message = {**tool_use("toolu_s", "Read", {"file_path": "/r"}), "parent_tool_use_id": "toolu_agent"}
    opened = out(t.message(message))[1]
    assert opened["key"] == {"providerItemId": "toolu_s", "parentRef": "toolu_agent"}
    assert t.checkpoint == "u-1"  # sidechain messages never move the checkpoint


def test_unknown_messages_are_unhandled_message_first() -> None:
    (delta,) = out(Translator(THREAD).message({"type": "mystery", "parent_tool_use_id": "toolu_p"}))
    assert delta["rawType"] == "sdk/mystery" and delta["parentRef"] == "toolu_p"
    assert list(delta["raw"]["params"]) == ["message", "threadId"]
    assert Translator(THREAD).message({"type": "system", "subtype": "init"}) == []
    (system,) = out(Translator(THREAD).message({"type": "system", "subtype": "post_turn_summary"}))
    assert system["rawType"] == "sdk/system"


def test_malformed_assistant_is_reported() -> None:
    (delta,) = out(Translator(THREAD).message(assistant([{"type": "text", "text": "x"}], uuid="")))
    assert delta["rawType"] == "sdk/assistant:text" and list(delta["raw"]["params"]) == ["threadId", "message"]


# -- system messages, retries and rate limits (§4.8, §4.10, §4.13) ----------------------------


def test_api_retry_opens_a_turn_or_is_thread_scoped_in_a_late_drain() -> None:
    retry = {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 2,
        "max_retries": 10,
        "retry_delay_ms": 1200.0,
        "error_status": 429,
        "error": "rate_limit",
    }
    t = Translator(THREAD)
    t.input_accepted(CREQ)
    deltas = out(t.message(retry))
    assert deltas == [
        {"kind": "turn.open"},
        {
            "kind": "provider.error",
            "message": "Provider error",
            "detail": "Claude Code API retry 2/10 after 1200ms: HTTP 429 rate_limit",
            "willRetry": True,
            "errorInfo": {"category": "rate-limit", "providerCode": "rate_limit", "httpStatusCode": 429},
        },
    ]
    t.message(result(is_error=True, result="boom"))
    (scoped,) = out(t.message({**retry, "error_status": None, "error": "server_error"}))
    assert scoped["detail"].endswith("ms: server_error") and scoped["threadScoped"] is True


def test_hard_rate_limit_rejection_fails_through_the_result() -> None:
    t = turn()
    info = {
        "status": "rejected",
        "resetsAt": 1700000000,
        "rateLimitType": "seven_day",
        "overageStatus": "rejected",
        "overageDisabledReason": "org_level_disabled",
    }
    opened = out(t.message({"type": "rate_limit_event", "rate_limit_info": info}))
    assert opened[0] == {"kind": "turn.open"}
    assert opened[1]["rateLimits"] == {
        "providerId": "claude-code",
        "status": "blocked",
        "kind": "subscription-window",
        "windows": [
            {"providerKey": "seven_day", "label": "Weekly limit", "status": "blocked", "resetsAtMs": 1700000000000}
        ],
        "reachedReason": "seven_day",
        "overageStatus": "rejected",
        "overageReason": "org_level_disabled",
    }
    deltas = out(t.message(result()))
    error = next(d for d in deltas if d["kind"] == "provider.error")
    assert (
        error["detail"]
        == "Claude Code rate limit rejected; type seven_day; resetsAt 1700000000; overage rejected; overage disabled: org_level_disabled"
    )
    assert error["errorInfo"] == {"category": "rate-limit", "providerCode": "rate_limit_event", "httpStatusCode": None}
    assert deltas[-1]["status"] == "completed"


def test_allowed_rate_limit_disarms_a_rejection() -> None:
    t = turn()
    t.message({"type": "rate_limit_event", "rate_limit_info": {"status": "rejected"}})
    (snapshot,) = out(t.message({"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}}))
    assert snapshot["rateLimits"]["kind"] == "unknown" and snapshot["rateLimits"]["overageStatus"] is None
    assert "provider.error" not in kinds(t.message(result()))


def test_overage_keeps_a_blocked_window_allowed() -> None:
    info = {"status": "rejected", "rateLimitType": "overage", "overageStatus": "allowed_warning"}
    (snapshot,) = out(Translator(THREAD).message({"type": "rate_limit_event", "rate_limit_info": info}))
    assert (snapshot["rateLimits"]["status"], snapshot["rateLimits"]["kind"]) == ("warning", "credits")


def test_malformed_rate_limit_is_reported() -> None:
    (delta,) = out(Translator(THREAD).message({"type": "rate_limit_event", "rate_limit_info": {"status": ""}}))
    assert delta["rawType"] == "sdk/rate_limit_event"


def test_model_fallback_is_reported_once_per_segment() -> None:
    t = turn()
    block = {"type": "fallback", "from": {"model": "opus"}, "to": {"model": "sonnet"}}
    assert out(t.message(assistant([block]))) == [
        {"kind": "turn.open"},
        {
            "kind": "provider.modelFallback",
            "originalModel": "opus",
            "fallbackModel": "sonnet",
            "reason": "provider",
            "message": "Switched from opus to sonnet.",
        },
    ]
    system = {"type": "system", "subtype": "model_fallback", "original_model": "opus", "fallback_model": "sonnet"}
    assert t.message(system) == []
    refusal = {**system, "subtype": "model_refusal_fallback", "fallback_model": "haiku", "content": "Refused."}
    assert out(t.message(refusal))[0]["reason"] == "refusal"


def test_refusal_without_fallback_warns() -> None:
    (warning,) = out(Translator(THREAD).message({"type": "system", "subtype": "model_refusal_no_fallback"}))
    assert warning == {
        "kind": "provider.warning",
        "summary": "Model refused the request",
        "details": "The selected model refused the request and no fallback model was available.",
        "vouchedTurn": True,
    }


def test_permission_denied_describes_the_denied_input() -> None:
    t = turn()
    t.message(tool_use("toolu_d", "Bash", {"command": "rm -rf /"}))
    denied = {
        "type": "system",
        "subtype": "permission_denied",
        "tool_name": "Bash",
        "tool_use_id": "toolu_d",
        "message": "no",
        "decision_reason": "policy",
        "decision_reason_type": "rule",
    }
    (warning,) = out(t.message(denied))
    assert warning["summary"] == "Bash was denied automatically"
    assert warning["details"] == "policy (rule)\n\nBash input:\nrm -rf /"


def test_compaction_closes_only_in_its_segment() -> None:
    t = turn()
    assert kinds(t.message({"type": "system", "subtype": "status", "status": "compacting"})) == [
        "turn.open",
        "item.open",
    ]
    assert kinds(t.message({"type": "system", "subtype": "status", "status": None})) == ["item.close"]
    t.message({"type": "system", "subtype": "status", "status": "compacting"})
    t.message(result())
    assert t.message({"type": "system", "subtype": "status"}) == []


def test_conversation_reset_clears_context() -> None:
    assert kinds(Translator(THREAD).message({"type": "conversation_reset"})) == ["turn.open", "context.cleared"]


def test_error_info_table() -> None:
    assert error_info(None, None, None) is None
    assert error_info("unknown", None, None) == g.ErrorInfo(
        category="unknown", providerCode="unknown", httpStatusCode=None
    )
    assert error_info("unknown", 404, None) == g.ErrorInfo(
        category="bad-request", providerCode="unknown", httpStatusCode=404
    )
    info = error_info("server_error", 529, None)
    assert info is not None and (info.category, info.providerCode) == ("overloaded", "server_error")
    info = error_info(None, 402, "success")
    assert info is not None and (info.category, info.providerCode) == ("billing", None)
    assert error_info(None, None, "success") is None


# -- turn-independent deltas (§4.11) --------------------------------------------------


def test_settlement_and_stream_error() -> None:
    assert Translator(THREAD).settlement() == []
    assert Translator(THREAD).stream_error("x") == []
    t = turn()
    assert out(t.stream_error("Claude Code process exited with code 1")) == [
        {"kind": "turn.open"},
        {
            "kind": "provider.error",
            "message": "Provider error",
            "detail": "Claude Code process exited with code 1",
            "settlesTurn": True,
        },
    ]
    assert not t.turn_open
    t = turn()
    assert kinds(t.settlement()) == ["session.ended"] and not t.turn_open


# -- background tasks (§4.9) ---------------------------------------------------------------


def task_started(task_id: str = "t1", task_type: str = "local_agent", **extra: Any) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "task_started",
        "task_id": task_id,
        "description": "Do it",
        "task_type": task_type,
        **extra,
    }


def test_a_running_subagent_withholds_the_boundary_and_drains_as_stopped() -> None:
    t = turn()
    assert kinds(t.message(task_started(tool_use_id="toolu_a"))) == ["turn.open", "item.open"]
    assert kinds(t.message(result())) == ["turn.open", "contextWindow"]
    assert t.turn_open
    settled = out(t.settlement())
    assert [d["kind"] for d in settled] == ["session.ended", "item.close"]
    assert settled[1]["key"] == {"providerItemId": "task:t1", "parentRef": "toolu_a"}
    assert (settled[1]["status"], settled[1]["item"]["taskStatus"]) == ("interrupted", "stopped")


def test_unmaterialized_and_duplicate_task_starts_are_ignored() -> None:
    t = turn()
    assert t.message(task_started(task_type="remote_agent")) == []
    t.message(task_started())
    assert t.message(task_started()) == []


def test_restarted_task_gets_a_new_generation() -> None:
    t = turn()
    t.message(task_started(task_type="local_bash"))
    done = {
        "type": "system",
        "subtype": "task_notification",
        "task_id": "t1",
        "status": "failed",
        "output_file": "",
        "summary": "s",
    }
    closed = out(t.message(done))[0]
    assert closed["status"] == "failed" and "outputFile" not in closed["item"]
    assert closed["presentation"]["label"]["pending"] == "Running background command"
    reopened = out(t.message(task_started(task_type="local_bash")))[1]
    assert reopened["key"] == {"providerItemId": "task:t1#2"}


def test_workflow_progress_folds_phases_and_agents() -> None:
    t = turn()
    t.message(task_started(task_type="local_workflow", workflow_name="Deploy"))
    progress = {
        "type": "system",
        "subtype": "task_progress",
        "task_id": "t1",
        "description": "ignored",
        "usage": {"total_tokens": 1, "tool_uses": 2, "duration_ms": 3},
        "workflow_progress": [
            {"type": "workflow_agent", "index": 2, "label": "b", "state": "error", "skipped": True},
            {"type": "workflow_agent", "index": 1, "label": "a", "state": "running", "queuedAt": 5, "phaseIndex": 1},
            {"type": "workflow_phase", "index": 1, "title": "Build", "kind": "parallel"},
            {"type": "workflow_agent", "index": 0, "label": "bad", "state": "done"},
        ],
    }
    (delta,) = out(t.message(progress))
    snapshot = delta["snapshot"]
    assert snapshot["description"] == "Do it" and snapshot["workflowName"] == "Deploy"
    assert snapshot["workflow"]["phases"] == [{"index": 1, "title": "Build", "kind": "parallel"}]
    assert snapshot["workflow"]["agents"] == [
        {
            "index": 1,
            "label": "a",
            "state": "queued",
            "model": "unknown",
            "attempt": 1,
            "cached": False,
            "lastProgressAt": 5,
            "phaseIndex": 1,
            "queuedAt": 5,
        },
        {
            "index": 2,
            "label": "b",
            "state": "skipped",
            "model": "unknown",
            "attempt": 1,
            "cached": False,
            "lastProgressAt": 0,
        },
    ]
    updated = {
        "type": "system",
        "subtype": "task_updated",
        "task_id": "t1",
        "patch": {"status": "paused", "error": "e"},
    }
    (delta,) = out(t.message(updated))
    assert delta["flush"] is True and delta["snapshot"]["status"] == "pending"


# -- plans (§4.6.3) -------------------------------------------------------------------------


def test_todo_write_snapshot_follows_its_open() -> None:
    t = turn()
    todos = [
        {"content": "Plan", "status": "completed"},
        {"content": "Build", "status": "in_progress", "activeForm": " Building "},
        {"content": "Skip", "status": "weird"},
        {"content": " ", "status": "pending"},
    ]
    deltas = out(t.message(tool_use("toolu_t", "TodoWrite", {"todos": todos})))
    assert [d["kind"] for d in deltas] == ["turn.open", "item.open", "item.close"]
    assert deltas[2]["item"] == {
        "type": "planSteps",
        "steps": [{"step": "Plan", "status": "completed"}, {"step": "Building", "status": "active"}],
    }
    assert deltas[2]["presentation"]["title"] == "Building" and deltas[2]["presentation"]["suppress"] is True
    assert plans.todo_steps({"todos": [{"content": 1}]}) is None


def test_task_list_tools_fold_into_snapshots() -> None:
    t = turn()
    t.message(tool_use("c1", "TaskCreate", {"subject": " Write docs ", "activeForm": "Writing docs"}))
    create = tool_result("c1", "created")
    create["tool_use_result"] = {"task": {"id": "1", "subject": "Write docs"}}
    deltas = out(t.message(create))
    assert deltas[1]["item"]["steps"] == [{"step": "Write docs", "status": "pending"}]
    t.message(tool_use("c2", "TaskUpdate", {"taskId": "1", "status": "in_progress"}))
    update = tool_result("c2", '{"success":true,"taskId":"1"}')
    assert out(t.message(update))[1]["item"]["steps"] == [{"step": "Writing docs", "status": "active"}]
    t.message(tool_use("c3", "TaskUpdate", {"taskId": "1", "status": "in_progress"}))
    assert kinds(t.message(tool_result("c3", '{"success":true,"taskId":"1"}'))) == ["item.close"]
    t.message(tool_use("c4", "TaskList", {}))
    listed = tool_result(
        "c4",
        json.dumps(
            {
                "tasks": [
                    {"id": "1", "subject": "Docs", "status": "completed"},
                    {"id": "2", "subject": "x", "status": "deleted"},
                ]
            }
        ),
    )
    assert out(t.message(listed))[1]["item"]["steps"] == [{"step": "Docs", "status": "completed"}]
    t.message(tool_use("c5", "TaskGet", {"taskId": "1"}))
    assert out(t.message(tool_result("c5", '{"task":null}')))[1]["item"]["steps"] == []
    t.message(tool_use("c6", "TaskCreate", {"subject": "x"}))
    assert kinds(t.message(tool_result("c6", "{}", is_error=True))) == ["item.close"]
