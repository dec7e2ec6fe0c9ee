"""Rate-limit snapshots (spec §3.6): codex's merged account snapshot normalized to `provider.rateLimits`.

Codex sends partial updates, so each is merged over the last snapshot; the reached reason is sticky only
while it is still true of the merged numbers.
"""

from __future__ import annotations

from typing import Any

from bbridge.core import grammar as g
from bbridge.core import js

from .fields import ShapeError

_FIELDS = ("limitId", "limitName", "primary", "secondary", "credits", "individualLimit", "planType")


def _optional(value: Any, check: Any) -> None:
    if value is not None and not check(value):
        raise ShapeError


def _window(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and js.is_number(value.get("usedPercent"))
        and (value.get("windowDurationMins") is None or js.is_number(value["windowDurationMins"]))
        and (value.get("resetsAt") is None or js.is_number(value["resetsAt"]))
    )


def _credits(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("hasCredits"), bool)
        and isinstance(value.get("unlimited"), bool)
    )


def _individual(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and js.is_str(value.get("limit"))
        and js.is_str(value.get("used"))
        and js.is_number(value.get("remainingPercent"))
        and js.is_number(value.get("resetsAt"))
    )


def check(snapshot: Any) -> dict[str, Any]:
    """The snapshot if it has codex's shape; raises `ShapeError` otherwise."""
    if not isinstance(snapshot, dict):
        raise ShapeError
    _optional(snapshot.get("limitId"), js.is_str)
    _optional(snapshot.get("limitName"), js.is_str)
    _optional(snapshot.get("planType"), js.is_str)
    _optional(snapshot.get("rateLimitReachedType"), js.is_str)
    _optional(snapshot.get("primary"), _window)
    _optional(snapshot.get("secondary"), _window)
    _optional(snapshot.get("credits"), _credits)
    _optional(snapshot.get("individualLimit"), _individual)
    return snapshot


def _active(reason: str, merged: dict[str, Any]) -> bool:
    if reason == "rate_limit_reached":
        return any(
            isinstance(merged.get(name), dict) and merged[name]["usedPercent"] >= 100
            for name in ("primary", "secondary")
        )
    if "credits_depleted" in reason:
        credits = merged.get("credits")
        return isinstance(credits, dict) and not credits["unlimited"] and not credits["hasCredits"]
    if "usage_limit_reached" in reason:
        individual = merged.get("individualLimit")
        return isinstance(individual, dict) and individual["remainingPercent"] <= 0
    return False


def merge(previous: dict[str, Any] | None, update: dict[str, Any]) -> dict[str, Any]:
    """Each field from the update when non-null, else the previous value (the reason: see the module doc)."""
    before = previous or {}
    merged: dict[str, Any] = {}
    for name in _FIELDS:
        value = update.get(name)
        merged[name] = value if value is not None else before.get(name)
    reason = update.get("rateLimitReachedType")
    old = before.get("rateLimitReachedType")
    if reason is None and isinstance(old, str) and _active(old, merged):
        reason = old
    merged["rateLimitReachedType"] = reason
    return merged


def _status(used: float) -> str:
    return "blocked" if used >= 100 else "warning" if used >= 90 else "allowed"


def _window_out(key: str, label: str, used: float, resets_at: Any) -> g.RateLimitWindow:
    clamped = min(max(used, 0), 100)
    resets = None if resets_at is None else int(resets_at * 1000)
    return g.RateLimitWindow(providerKey=key, label=label, status=_status(clamped), resetsAtMs=resets)  # type: ignore[arg-type]


def normalize(merged: dict[str, Any]) -> g.RateLimits:
    """The provider-neutral view the runtime shows (windows, kind, status)."""
    windows: list[g.RateLimitWindow] = []
    primary, secondary = merged.get("primary"), merged.get("secondary")
    individual, credits = merged.get("individualLimit"), merged.get("credits")
    if isinstance(primary, dict):
        windows.append(_window_out("primary", "Current session", primary["usedPercent"], primary.get("resetsAt")))
    if isinstance(secondary, dict):
        windows.append(_window_out("secondary", "Weekly limit", secondary["usedPercent"], secondary.get("resetsAt")))
    if isinstance(individual, dict):
        used = 100 - individual["remainingPercent"]
        windows.append(_window_out("individual-limit", "Spend control", used, individual["resetsAt"]))
    reason = merged.get("rateLimitReachedType")
    exhausted = isinstance(credits, dict) and not credits["unlimited"] and not credits["hasCredits"]
    kind: str
    if reason == "rate_limit_reached":
        kind = "subscription-window"
    elif isinstance(reason, str) and "credits_depleted" in reason:
        kind = "credits"
    elif isinstance(reason, str) and "usage_limit_reached" in reason:
        kind = "spend-control"
    elif reason is not None:
        kind = "unknown"
    elif exhausted:
        kind = "credits"
    elif isinstance(individual, dict):
        kind = "spend-control"
    elif isinstance(primary, dict) or isinstance(secondary, dict):
        kind = "subscription-window"
    else:
        kind = "unknown"
    statuses = [window.status for window in windows]
    status: str
    if reason is not None or "blocked" in statuses:
        status = "blocked"
    elif "warning" in statuses:
        status = "warning"
    elif windows or (isinstance(credits, dict) and credits["hasCredits"] is True):
        status = "allowed"
    else:
        status = "unknown"
    return g.RateLimits(
        providerId="codex",
        status=status,  # type: ignore[arg-type]
        kind=kind,  # type: ignore[arg-type]
        windows=windows,
        reachedReason=reason,
        overageStatus=None,
        overageReason=None,
    )
