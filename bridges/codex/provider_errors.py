"""Codex `error` notifications as `provider.error` (spec §3.7), with retry correlation.

Codex reports retries with a precise error variant but often ends the run with a generic `other`; when
the final failure repeats a remembered retry's text, the precise variant is the truthful one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bbridge.core import grammar as g
from bbridge.core import js

from .fields import ShapeError, need, obj, optional_text, text

_PLAIN = {
    "contextWindowExceeded": "context-window-exceeded",
    "usageLimitExceeded": "rate-limit",
    "serverOverloaded": "overloaded",
    "cyberPolicy": "policy",
    "internalServerError": "internal",
    "unauthorized": "unauthorized",
    "badRequest": "bad-request",
    "threadRollbackFailed": "thread-rollback-failed",
    "sandboxError": "sandbox",
    "other": "unknown",
}
_WITH_STATUS = {
    "httpConnectionFailed": "connection-failed",
    "responseStreamConnectionFailed": "connection-failed",
    "responseStreamDisconnected": "stream-disconnected",
    "responseTooManyFailedAttempts": "too-many-failed-attempts",
}


def error_info(info: Any) -> g.ErrorInfo | None:
    """The provider-neutral category of a `codexErrorInfo`; raises `ShapeError` for an unknown variant."""
    if info is None:
        return None
    if isinstance(info, str) and info in _PLAIN:
        return g.ErrorInfo(category=_PLAIN[info], providerCode=info, httpStatusCode=None)  # type: ignore[arg-type]
    if isinstance(info, dict) and len(info) == 1:
        ((name, body),) = info.items()
        if name in _WITH_STATUS and isinstance(body, dict):
            code = body.get("httpStatusCode")
            if code is None or js.is_number(code):
                return g.ErrorInfo(category=_WITH_STATUS[name], providerCode=name, httpStatusCode=code)  # type: ignore[arg-type]
        if (
            name == "activeTurnNotSteerable"
            and isinstance(body, dict)
            and body.get("turnKind") in ("review", "compact")
        ):
            return g.ErrorInfo(category="active-turn-not-steerable", providerCode=name, httpStatusCode=None)
    raise ShapeError


@dataclass(slots=True)
class _Retry:
    info: Any
    text: str


class ErrorMapper:
    """Per-session retry memory keyed by (codex thread, turn)."""

    def __init__(self) -> None:
        self._retries: dict[tuple[str, str], _Retry] = {}

    def forget(self, thread: str, turn: str) -> None:
        self._retries.pop((thread, turn), None)

    def forget_thread(self, thread: str) -> None:
        for key in [key for key in self._retries if key[0] == thread]:
            del self._retries[key]

    def map(self, params: dict[str, Any]) -> g.ProviderError:
        """The delta for valid params; raises `ShapeError` for params codex's schema does not allow."""
        thread, turn, error = text(params, "threadId"), optional_text(params, "turnId"), obj(params.get("error"))
        message, details = text(error, "message"), optional_text(error, "additionalDetails")
        will_retry = params.get("willRetry")
        need("willRetry" not in params or isinstance(will_retry, bool))
        own = error.get("codexErrorInfo")
        error_info(own)
        failure = details if details is not None else message
        key = (thread, turn or "")
        info = own
        if will_retry is True:
            if own is not None and own != "other":
                self._retries[key] = _Retry(own, failure)
        elif will_retry is False:
            remembered = self._retries.pop(key, None)
            if own == "other" and remembered is not None and remembered.text == failure:
                info = remembered.info
        delta = g.ProviderError(message="Provider error", detail=f"{message}\n{details}" if details else message)
        if "willRetry" in params:
            delta.willRetry = bool(will_retry)
        resolved = error_info(info)
        if resolved is not None:
            delta.errorInfo = resolved
        if turn is not None:
            delta.providerTurnId = turn
        else:
            delta.threadScoped = True
        return delta
