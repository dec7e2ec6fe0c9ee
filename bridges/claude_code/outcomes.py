"""What a turn's end and a rate-limit event report (spec §4.7, §4.10, §4.13): error categories, token usage and
context windows, rate-limit snapshots.

Pure tables and functions over the SDK's `result` and `rate_limit_info` members; the translator decides which
turn they land on.
"""

from __future__ import annotations

from typing import Any

from bbridge.core import grammar as g
from bbridge.core import js

Json = Any
Message = dict[str, Any]
PROVIDER_ID = "claude-code"
MILLION, DEFAULT_WINDOW = 1_000_000, 200_000
API_RETRY_ERRORS = frozenset(
    {
        "authentication_failed",
        "oauth_org_not_allowed",
        "billing_error",
        "rate_limit",
        "invalid_request",
        "model_not_found",
        "server_error",
        "unknown",
        "max_output_tokens",
    }
)
_CODE_CATEGORIES: dict[str, g.ErrorCategory] = {
    "authentication_failed": "unauthorized",
    "oauth_org_not_allowed": "unauthorized",
    "billing_error": "billing",
    "rate_limit": "rate-limit",
    "invalid_request": "bad-request",
    "model_not_found": "bad-request",
    "server_error": "internal",
    "max_output_tokens": "max-output-tokens",
}
_SUBTYPE_CATEGORIES: dict[str, g.ErrorCategory] = {
    "error_max_turns": "max-turns",
    "error_max_budget_usd": "budget-exceeded",
    "error_max_structured_output_retries": "structured-output-retries",
}
_SUBTYPE_DETAILS = {
    "error_during_execution": "Claude Code failed during execution.",
    "error_max_budget_usd": "Claude Code exceeded the configured budget.",
    "error_max_structured_output_retries": "Claude Code exhausted structured output retries.",
    "error_max_turns": "Claude Code reached the maximum number of turns.",
}
_WINDOW_STATUS: dict[Any, g.LimitStatus] = {"allowed": "allowed", "allowed_warning": "warning", "rejected": "blocked"}
_OVERAGE_STATUS = {"allowed": "allowed", "allowed_warning": "warning", "rejected": "rejected"}
_LIMIT_LABELS = {
    "five_hour": "Five-hour limit",
    "seven_day": "Weekly limit",
    "seven_day_opus": "Weekly Opus limit",
    "seven_day_sonnet": "Weekly Sonnet limit",
    "seven_day_overage_included": "Weekly included overage",
    "overage": "Overage",
}


def context_hint(model: str | None) -> int | None:
    """The context window a model implies, for results without a usable `modelUsage` (§3.5)."""
    if model is None:
        return None
    if model.endswith("[1m]") or model in ("best", "claude-fable-5", "fable"):
        return MILLION
    return None if model == "default" else DEFAULT_WINDOW


def error_info(code: str | None, status: Json, subtype: str | None) -> g.ErrorInfo | None:
    """§4.13: a category from the Claude error code, else the HTTP status, else the result subtype."""
    http = status if js.is_number(status) else None
    category: g.ErrorCategory
    if code is not None and http == 529:
        category = "overloaded"
    elif code is not None and code in _CODE_CATEGORIES:
        category = _CODE_CATEGORIES[code]
    elif http is not None:
        category = _http_category(http)
    elif code is None and subtype is not None:
        category = _SUBTYPE_CATEGORIES.get(subtype, "unknown")
    else:
        category = "unknown"
    provider_code = code if code is not None else subtype if subtype in _SUBTYPE_DETAILS else None
    if category == "unknown" and provider_code is None and http is None:
        return None
    return g.ErrorInfo(category=category, providerCode=provider_code, httpStatusCode=http)


def _http_category(status: int | float) -> g.ErrorCategory:
    if status == 402:
        return "billing"
    if status in (401, 403):
        return "unauthorized"
    if status == 429:
        return "rate-limit"
    if status == 529:
        return "overloaded"
    if 400 <= status < 500:
        return "bad-request"
    return "internal" if 500 <= status < 600 else "unknown"


def nonempty_string(value: Json) -> str | None:
    return value if isinstance(value, str) and value else None


def valid_result(m: Message) -> bool:
    if not isinstance(m.get("subtype"), str):
        return False
    if "is_error" in m and not isinstance(m["is_error"], bool):
        return False
    if "api_error_status" in m and not (m["api_error_status"] is None or js.is_number(m["api_error_status"])):
        return False
    errors = m.get("errors", [])
    if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
        return False
    return "origin" not in m or (isinstance(m["origin"], dict) and nonempty_string(m["origin"].get("kind")) is not None)


def valid_rate_limit(info: Json) -> bool:
    if not isinstance(info, dict) or nonempty_string(info.get("status")) is None:
        return False
    if "resetsAt" in info and not js.is_number(info["resetsAt"]):
        return False
    names = ("rateLimitType", "overageStatus", "overageDisabledReason")
    return all(nonempty_string(info[n]) is not None for n in names if n in info)


def model_window(model_usage: Json) -> int | float | bool | None:
    """The largest positive `contextWindow` of a parsed `modelUsage` (None when none is positive); False when absent or malformed."""
    if not isinstance(model_usage, dict):
        return False
    windows = []
    for usage in model_usage.values():
        if not isinstance(usage, dict) or not js.is_number(usage.get("contextWindow")):
            return False
        windows.append(usage["contextWindow"])
    positive = [w for w in windows if w > 0]
    return max(positive) if positive else None


def last_usage(usage: Json) -> g.TokenBreakdown | None:
    names = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    if not isinstance(usage, dict) or not all(js.is_number(usage[n]) for n in names if n in usage):
        return None
    given, made, read, created = (max(usage.get(n, 0), 0) for n in names)
    return breakdown(given + made + read + created, given, read + created, made)


def breakdown(total: int | float, given: int | float, cached: int | float, made: int | float) -> g.TokenBreakdown:
    return g.TokenBreakdown(
        totalTokens=total, inputTokens=given, cachedInputTokens=cached, outputTokens=made, reasoningOutputTokens=0
    )


def failure_detail(m: Message, subtype: str) -> str:
    if m.get("is_error") is True and isinstance(m.get("result"), str):
        return str(m["result"])
    errors = [js.trim(e) for e in m.get("errors", []) if js.trim(e)]
    if errors:
        return "\n".join(errors)
    return _SUBTYPE_DETAILS.get(subtype, f"Claude Code result failed: {subtype}")


def _milliseconds(seconds: int | float) -> int:
    """`resetsAt × 1000`; the grammar takes whole milliseconds (a fractional one, never seen, is rounded)."""
    return round(seconds * 1000)


def rate_limits(info: dict[str, Any]) -> tuple[g.ProviderRateLimits, g.LimitStatus]:
    """A valid `rate_limit_info` as the canonical snapshot, and its overall status (an allowed overage lifts a block)."""
    limit_type = info.get("rateLimitType")
    window_status: g.LimitStatus = _WINDOW_STATUS.get(info["status"], "unknown")
    overage = info.get("overageStatus")
    overage_status = None if overage is None else _OVERAGE_STATUS.get(overage, "unavailable")
    status: g.LimitStatus = window_status
    if window_status == "blocked" and overage_status == "allowed":
        status = "allowed"
    elif window_status == "blocked" and overage_status == "warning":
        status = "warning"
    resets_at: Json = info.get("resetsAt")
    snapshot = g.ProviderRateLimits(
        rateLimits=g.RateLimits(
            providerId=PROVIDER_ID,
            status=status,
            kind="credits" if limit_type == "overage" else "unknown" if limit_type is None else "subscription-window",
            windows=[
                g.RateLimitWindow(
                    providerKey=limit_type,
                    label=_LIMIT_LABELS.get(limit_type) if limit_type is not None else None,
                    status=window_status,
                    resetsAtMs=None if resets_at is None else _milliseconds(resets_at),
                )
            ],
            reachedReason=(limit_type or "rate_limit_rejected") if window_status == "blocked" else None,
            overageStatus=overage_status,  # type: ignore[arg-type]
            overageReason=info.get("overageDisabledReason"),
        )
    )
    return snapshot, status


def hard_rejection(info: dict[str, Any]) -> bool:
    """A rejection no overage covers: it fails the turn (§4.10)."""
    return bool(info["status"] == "rejected" and info.get("overageStatus") not in ("allowed", "allowed_warning"))


def rejection_detail(info: dict[str, Any]) -> str:
    """The failed turn's detail for a hard rejection."""
    limit_type, resets_at, overage = info.get("rateLimitType"), info.get("resetsAt"), info.get("overageStatus")
    detail = "Claude Code rate limit rejected"
    if limit_type is not None:
        detail += f"; type {limit_type}"
    if resets_at is not None:
        detail += f"; resetsAt {js.number_text(resets_at)}"
    if overage is not None:
        detail += f"; overage {overage}"
    if info.get("overageDisabledReason") is not None:
        detail += f"; overage disabled: {info['overageDisabledReason']}"
    return detail
