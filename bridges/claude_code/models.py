"""`model/list` (spec §3.2): the curated catalog, the models the CLI itself offers, the selected-only aliases.

The CLI lists its models in its `initialize` answer, so a short-lived probe child is started without a session
(and without hooks) just to read that list; the result is kept for two minutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import trio

from bbridge.core import js
from bbridge.kit.child import Child
from bridges.claude_code import launch
from bridges.claude_code.child import control_request, encode, request_id

MEMO_S = 120.0
PROBE_TIMEOUT_S = 60.0
DEFAULT_MODEL = "claude-opus-5[1m]"
PROBE_FLAGS = (
    "--output-format", "stream-json", "--verbose", "--input-format", "stream-json", "--setting-sources=",
    "--permission-mode", "bypassPermissions", "--allow-dangerously-skip-permissions", "--no-session-persistence",
)  # fmt: skip
EFFORT_TEXT = {
    "low": "Low reasoning effort",
    "medium": "Medium reasoning effort",
    "high": "High reasoning effort",
    "xhigh": "Extra high reasoning effort",
    "ultracode": "Extra high reasoning effort plus multi-agent workflow orchestration",
    "max": "Maximum reasoning effort",
}
LADDER = ("low", "medium", "high", "xhigh", "ultracode", "max")
STANDARD = ("low", "medium", "high", "max")
LOW_ONLY = ("low",)
CATALOG = (
    ("claude-fable-5", "Fable 5", "Fable 5 for demanding reasoning; requires Claude Code v2.1.170+", LADDER, "high"),
    ("claude-opus-5[1m]", "Opus 5 (1M)", "Opus 5 with 1M context for complex long coding sessions", LADDER, "high"),
    ("claude-opus-4-8[1m]", "Opus 4.8 (1M)", "Opus 4.8 with 1M context for complex long coding sessions", LADDER, "high"),
    ("claude-opus-4-7[1m]", "Opus 4.7 (1M)", "Opus 4.7 with 1M context for complex long coding sessions", LADDER, "medium"),
    ("claude-sonnet-5", "Sonnet 5", "Sonnet 5 for everyday coding tasks with deeper reasoning", LADDER, "medium"),
)  # fmt: skip
SELECTED_ONLY = (
    ("claude-sonnet-4-6[1m]", "Sonnet 4.6 (1M)", "Sonnet 4.6 with 1M context for long coding sessions", STANDARD, "medium"),
    ("claude-sonnet-4-6", "Sonnet 4.6", "Sonnet 4.6 for everyday coding tasks", STANDARD, "medium"),
    ("claude-haiku-4-5", "Haiku 4.5", "Haiku 4.5 for quick answers", LOW_ONLY, "low"),
    ("claude-opus-4-8", "Opus 4.8 (Legacy)", "Legacy Opus 4.8 model retained for existing non-1M selections", LADDER, "high"),
    ("claude-opus-4-7", "Opus 4.7 (Legacy)", "Legacy Opus 4.7 model retained for existing non-1M selections", LADDER, "medium"),
    ("claude-opus-4-6[1m]", "Opus 4.6 (1M, Legacy)", "Legacy Opus 4.6 1M model retained for existing selections", STANDARD, "medium"),
    ("claude-opus-4-6", "Opus 4.6 (Legacy)", "Legacy Opus 4.6 model retained for existing selections", STANDARD, "medium"),
    ("best", "Best Alias", "Moving best alias retained for existing selections; resolves to Fable 5 where available", LADDER, "high"),
    ("fable", "Fable Alias", "Moving Fable alias retained for existing selections; resolves to Claude Fable 5", LADDER, "high"),
    ("opus[1m]", "Opus Alias (1M, Current)", "Moving Opus 1M alias accepted by Claude Code; resolves to the current Opus 1M model", LADDER, "high"),
    ("opus", "Opus Alias (Current)", "Moving Opus alias accepted by Claude Code; resolves to the current Opus model", LADDER, "high"),
    ("sonnet[1m]", "Sonnet Alias (1M, Legacy)", "Legacy moving Sonnet 1M alias retained for existing selections", STANDARD, "medium"),
    ("sonnet", "Sonnet Alias (Legacy)", "Legacy moving Sonnet alias retained for existing selections", STANDARD, "medium"),
    ("haiku", "Haiku Alias (Legacy)", "Legacy moving Haiku alias retained for existing selections", LOW_ONLY, "low"),
)  # fmt: skip


def _row(model: str, name: str, description: str, efforts: tuple[str, ...], default: str) -> dict[str, Any]:
    return {
        "id": model,
        "model": model,
        "displayName": name,
        "description": description,
        "supportedReasoningEfforts": [{"reasoningEffort": e, "description": EFFORT_TEXT[e]} for e in efforts],
        "defaultReasoningEffort": default,
        "isDefault": False,
    }


def _efforts(levels: Any) -> tuple[str, ...]:
    offered: list[str] = []
    for level in levels if isinstance(levels, list) else []:
        offered += ["xhigh", "ultracode"] if level == "xhigh" else [level] if level in EFFORT_TEXT else []
    return tuple(offered) or LOW_ONLY


def _default_effort(efforts: tuple[str, ...]) -> str:
    return "high" if "high" in efforts else "medium" if "medium" in efforts else efforts[0]


def build(discovered: list[Any]) -> dict[str, Any]:
    """The `model/list` result from the CLI's `ModelInfo` entries."""
    entries = [e for e in discovered if isinstance(e, dict) and isinstance(e.get("value"), str)]
    models = [_row(*row) for row in CATALOG]
    for entry in sorted(entries, key=lambda e: e["value"] == "default"):
        model = entry.get("resolvedModel") or entry["value"]
        if any(row["model"] == model for row in models):
            continue
        efforts = _efforts(entry.get("supportedEffortLevels"))
        models.append(
            _row(
                model,
                str(entry.get("displayName", model)),
                str(entry.get("description", "")),
                efforts,
                _default_effort(efforts),
            )
        )
    known = {e["value"] for e in entries} | {
        e["resolvedModel"] for e in entries if isinstance(e.get("resolvedModel"), str)
    }
    taken = {row["model"] for row in models}
    selected = [_row(*row) for row in SELECTED_ONLY if row[0] in known and row[0] not in taken]
    default_entry = next((e for e in entries if e["value"] == "default"), None)
    resolved = default_entry.get("resolvedModel") if default_entry is not None else None
    chosen = resolved if resolved in taken else DEFAULT_MODEL if DEFAULT_MODEL in taken else models[0]["model"]
    next(row for row in models if row["model"] == chosen)["isDefault"] = True
    return {"models": models, "selectedOnlyModels": selected}


async def probe(env: Mapping[str, str], cwd: str) -> list[Any]:
    """The CLI's model list: a session-less child answers `initialize`, then is closed."""
    # not recorded (no lane holds the probe) and its stderr is not kept (no message quotes it)
    child = Child(
        launch.command(launch.executable(env), PROBE_FLAGS),
        env=env,
        cwd=cwd,
        thread_id=None,
        record=False,
        stderr=False,
    )
    try:
        await child.spawn()
    except FileNotFoundError:
        raise launch.LaunchError(launch.MISSING_CLI) from None
    ident = request_id()
    user = {"type": "user", "session_id": "", "message": {"role": "user", "content": [{"type": "text", "text": "."}]}}
    try:
        with trio.fail_after(PROBE_TIMEOUT_S):
            await child.write(encode(control_request(ident, {"subtype": "initialize", "systemPrompt": [""]})))
            await child.write(encode({**user, "parent_tool_use_id": None}))
            async for line in child.lines():
                response = _initialize_response(line, ident)
                if response is not None:
                    return _models(response)
        raise launch.LaunchError("Claude Code exited before listing its models")
    except trio.TooSlowError:
        raise launch.LaunchError("Claude Code did not list its models in time") from None
    finally:
        with trio.CancelScope(shield=True):
            await child.close_stdin()
            child.kill_group()
            await child.wait()


def _initialize_response(line: bytes, ident: str) -> dict[str, Any] | None:
    try:
        message = js.parse(line)
    except msgspec.DecodeError:
        return None
    response = (
        message.get("response") if isinstance(message, dict) and message.get("type") == "control_response" else None
    )
    if not isinstance(response, dict) or response.get("request_id") != ident:
        return None
    if response.get("subtype") == "error":
        raise launch.LaunchError(str(response.get("error")))
    return response


def _models(response: dict[str, Any]) -> list[Any]:
    body = response.get("response")
    models = body.get("models") if isinstance(body, dict) else None
    return models if isinstance(models, list) else []


class ModelList:
    """The memoized catalog: one probe at a time, a success kept for two minutes, failures not kept."""

    def __init__(self) -> None:
        self._result: dict[str, Any] | None = None
        self._at = 0.0
        self._lock = trio.Lock()

    async def get(self, env: Mapping[str, str], cwd: str) -> dict[str, Any]:
        async with self._lock:
            if self._result is None or trio.current_time() - self._at > MEMO_S:
                self._result = build(await probe(env, cwd))
                self._at = trio.current_time()
            return self._result
