"""How an app-server child is launched and how its lines are framed (spec §1.3, §1.4).

Pure: the argv and environment come from the bridge's own environment (the replay seam
`BB_CODEX_BRIDGE_APP_SERVER_*`), and `classify` sorts a child's stdout line into response, request or
notification exactly as the reference's reader does, so the process side only moves bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bbridge.core import js

COMMAND_ENV = "BB_CODEX_BRIDGE_APP_SERVER_COMMAND"
ARGS_ENV = "BB_CODEX_BRIDGE_APP_SERVER_ARGS"
DEFAULT_ARGS = ("app-server",)
DEFAULT_ARGV = ("codex", *DEFAULT_ARGS)
DROPPED_ENV = frozenset({"NODE_ENV", "ELECTRON_RUN_AS_NODE"})
INITIALIZE_PARAMS = {
    "clientInfo": {"name": "bb", "version": "1.0.0", "title": None},
    "capabilities": {"experimentalApi": True},
}


class LaunchError(ValueError):
    """`BB_CODEX_BRIDGE_APP_SERVER_ARGS` is not a JSON array of strings: a hard error at launch."""


def argv(environ: Mapping[str, str]) -> list[str]:
    """Spec §1.3, but a command without `ARGS` runs as `COMMAND app-server` (the spec: bare `COMMAND`, which
    makes a pinned codex binary start its interactive TUI and die on `stdin is not a terminal`); `ARGS='[]'`
    runs it bare."""
    command = environ.get(COMMAND_ENV, "")
    if not command:
        return list(DEFAULT_ARGV)
    raw = environ.get(ARGS_ENV, "")
    if not raw:
        return [command, *DEFAULT_ARGS]
    try:
        args = json.loads(raw)
    except ValueError:
        args = None
    if not (isinstance(args, list) and all(isinstance(arg, str) for arg in args)):
        raise LaunchError(f"{ARGS_ENV} must be a JSON array of strings")
    return [command, *args]


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The bridge's environment without bb's own variables, which codex must not inherit."""
    return {
        name: value
        for name, value in environ.items()
        if value and not name.startswith("BB_") and name not in DROPPED_ENV
    }


@dataclass(slots=True, frozen=True)
class Response:
    id: float
    error: str | None
    result: Any


@dataclass(slots=True, frozen=True)
class Request:
    id: str | int | float
    method: str
    params: Any


@dataclass(slots=True, frozen=True)
class Notification:
    """`message` keeps only `method` and `params` (codex's `emittedAtMs` is discarded)."""

    method: str
    message: dict[str, Any]


def _number(value: Any) -> float:
    """JS `Number()` of an id: numeric strings convert, anything else is NaN (matches nothing)."""
    if js.is_number(value):
        return float(value)
    try:
        return float(str(value).strip() or "0")
    except ValueError:
        return math.nan


def classify(line: str | bytes) -> Response | Request | Notification | None:
    """One stdout line of a child; None for what the reader skips."""
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    text = js.trim(text)
    if not text:
        return None
    try:
        message = js.parse(text)
    except ValueError:
        return None
    if not isinstance(message, dict):
        return None
    ident, method = message.get("id"), message.get("method")
    has_id = isinstance(ident, str) or js.is_number(ident)
    if has_id and "method" not in message:
        error = message.get("error")
        if error:
            detail = error.get("message") if isinstance(error, dict) else None
            code = error.get("code") if isinstance(error, dict) else None
            reason = detail if isinstance(detail, str) and detail else None
            if reason is None:
                reason = (
                    f"codex app-server returned error code {js.stringify(code) if js.is_number(code) else 'unknown'}"
                )
            return Response(_number(ident), reason, None)
        return Response(_number(ident), None, message.get("result"))
    if not isinstance(method, str):
        return None
    if has_id and isinstance(ident, str | int | float):
        return Request(ident, method, message.get("params"))
    kept: dict[str, Any] = {"method": method}
    if "params" in message:
        kept["params"] = message["params"]
    return Notification(method, kept)


def request_line(ident: int, method: str, params: Any = None) -> bytes:
    """A request to the child: `jsonrpc, id, method, params` (params omitted when there are none)."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params is not None:
        message["params"] = params
    return js.stringify(message).encode() + b"\n"


def result_line(ident: Any, result: Any) -> bytes:
    return js.stringify({"jsonrpc": "2.0", "id": ident, "result": result}).encode() + b"\n"


def error_line(ident: Any, code: int, message: str) -> bytes:
    return js.stringify({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}).encode() + b"\n"
