"""The Claude Code translator's results and its mirror of the turn (spec §4.1, §4.7), and the deltas that are
independent of a turn (§4.11): settlement, late-drain suppression, usage, context hints, unhandled messages.
"""

from __future__ import annotations

from bridges.claude_code.outcomes import context_hint
from bridges.claude_code.translate import Translator
from tests.claude_messages import CREQ, THREAD, assistant, kinds, out, result, tool_result, tool_use, turn

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
