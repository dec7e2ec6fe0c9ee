"""The Claude Code translator's system messages (spec §4.8, §4.10, §4.13): API retries, rate limits and their
rejections, model fallbacks, refusals, denied permissions, compaction, error info.
"""

from __future__ import annotations

from bbridge.core import grammar as g
from bridges.claude_code.outcomes import error_info
from bridges.claude_code.translate import Translator
from tests.claude_messages import CREQ, THREAD, assistant, kinds, out, result, tool_use, turn

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
