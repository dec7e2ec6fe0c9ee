"""The codex translator's rate limits (spec §3.6: windows, thresholds, sticky reasons, the handshake seed) and
errors (§3.7: the error-info table, retry correlation).
"""

from __future__ import annotations

from typing import Any

import pytest

from bridges.codex import ratelimits
from bridges.codex.fields import ShapeError
from bridges.codex.provider_errors import error_info
from bridges.codex.translate import Translator
from tests.codex_notifications import THREAD, TURN, run

# -- §3.6 rate limits ----------------------------------------------------------------------


def limits(t: Translator, **snapshot: Any) -> dict[str, Any]:
    (delta,) = run(t, "account/rateLimits/updated", rateLimits=snapshot)
    shown: dict[str, Any] = delta["rateLimits"]
    return shown


def test_rate_limit_windows_thresholds_and_kinds() -> None:
    t = Translator()
    shown = limits(
        t,
        primary={"usedPercent": 91, "resetsAt": 10},
        secondary={"usedPercent": 120},
        individualLimit={"limit": "10", "used": "5", "remainingPercent": 50, "resetsAt": 2},
    )
    assert shown["windows"] == [
        {"providerKey": "primary", "label": "Current session", "status": "warning", "resetsAtMs": 10000},
        {"providerKey": "secondary", "label": "Weekly limit", "status": "blocked", "resetsAtMs": None},
        {"providerKey": "individual-limit", "label": "Spend control", "status": "allowed", "resetsAtMs": 2000},
    ]
    assert (shown["status"], shown["kind"]) == ("blocked", "spend-control")
    assert limits(Translator(), credits={"hasCredits": False, "unlimited": False})["kind"] == "credits"
    empty = limits(Translator(), limitId="codex", primary=None, credits=None)
    assert (empty["status"], empty["kind"], empty["windows"]) == ("unknown", "unknown", [])


def test_rate_limit_reason_is_sticky_only_while_still_true() -> None:
    t = Translator()
    reached = limits(t, primary={"usedPercent": 100}, rateLimitReachedType="rate_limit_reached")
    assert (reached["reachedReason"], reached["status"], reached["kind"]) == (
        "rate_limit_reached",
        "blocked",
        "subscription-window",
    )
    assert limits(t, rateLimitReachedType=None)["reachedReason"] == "rate_limit_reached"
    cleared = limits(t, primary={"usedPercent": 10})
    assert (cleared["reachedReason"], cleared["status"]) == (None, "allowed")


def test_rate_limits_merge_over_the_handshake_seed() -> None:
    t = Translator()
    t.seed_rate_limits({"rateLimits": {"primary": {"usedPercent": 95}}})
    assert limits(t, secondary={"usedPercent": 1})["windows"][0]["status"] == "warning"
    with pytest.raises(ShapeError):
        ratelimits.check({"primary": {"usedPercent": "x"}})


# -- §3.7 errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ("usageLimitExceeded", ("rate-limit", "usageLimitExceeded", None)),
        ("sandboxError", ("sandbox", "sandboxError", None)),
        ({"httpConnectionFailed": {"httpStatusCode": 401}}, ("connection-failed", "httpConnectionFailed", 401)),
        (
            {"responseTooManyFailedAttempts": {"httpStatusCode": None}},
            ("too-many-failed-attempts", "responseTooManyFailedAttempts", None),
        ),
        (
            {"activeTurnNotSteerable": {"turnKind": "compact"}},
            ("active-turn-not-steerable", "activeTurnNotSteerable", None),
        ),
    ],
)
def test_error_info_table(info: Any, expected: tuple[str, str, int | None]) -> None:
    mapped = error_info(info)
    assert mapped is not None and (mapped.category, mapped.providerCode, mapped.httpStatusCode) == expected


def test_retry_correlation_keeps_the_precise_variant_for_the_same_failure() -> None:
    t = Translator()
    retry = {
        "message": "Reconnecting... 1/5",
        "codexErrorInfo": {"responseStreamDisconnected": {"httpStatusCode": 502}},
        "additionalDetails": "boom",
    }
    run(t, "error", threadId=THREAD, turnId=TURN, error=retry, willRetry=True)
    (final,) = run(
        t, "error", threadId=THREAD, turnId=TURN, error={"message": "boom", "codexErrorInfo": "other"}, willRetry=False
    )
    assert final["errorInfo"] == {
        "category": "stream-disconnected",
        "providerCode": "responseStreamDisconnected",
        "httpStatusCode": 502,
    }
    (scoped,) = run(t, "error", threadId=THREAD, error={"message": "m", "additionalDetails": ""})
    assert scoped == {"kind": "provider.error", "message": "Provider error", "detail": "m", "threadScoped": True}
    assert (
        run(t, "error", threadId=THREAD, error={"message": "m", "codexErrorInfo": {"new": {}}})[0]["kind"]
        == "unhandled"
    )
