"""Codex `model/list` answers as the bridge's model catalogue (spec §2.2).

Codex lists reasoning efforts bb does not know and may list none; the catalogue keeps the known levels
and falls back to a stock list so every model stays selectable.
"""

from __future__ import annotations

from typing import Any

STOCK_DESCRIPTIONS = {
    "none": "No extended thinking",
    "low": "Low reasoning effort",
    "medium": "Medium reasoning effort",
    "high": "High reasoning effort",
    "xhigh": "Extra high reasoning effort",
    "ultracode": "Extra high reasoning effort plus multi-agent workflow orchestration",
    "max": "Maximum reasoning effort",
    "ultra": "Maximum reasoning with automatic task delegation",
}
STOCK_LEVELS = ("low", "medium", "high", "xhigh")
INVALID = "Invalid response from codex model/list."
EMPTY = "Codex model/list returned no supported models."


class ModelListError(ValueError):
    """A `model/list` answer the bridge cannot use; the runtime gets `-32000` with this text."""


def _efforts(listed: Any) -> list[dict[str, str]]:
    efforts: dict[str, dict[str, str]] = {}
    for entry in listed if isinstance(listed, list) else []:
        level = entry.get("reasoningEffort") if isinstance(entry, dict) else None
        if not isinstance(level, str) or level not in STOCK_DESCRIPTIONS or level in efforts:
            continue
        description = entry.get("description")
        text = description if isinstance(description, str) and description else STOCK_DESCRIPTIONS[level]
        efforts[level] = {"reasoningEffort": level, "description": text}
    if not efforts:
        return [{"reasoningEffort": level, "description": STOCK_DESCRIPTIONS[level]} for level in STOCK_LEVELS]
    return list(efforts.values())


def _model(entry: dict[str, Any]) -> dict[str, Any]:
    efforts = _efforts(entry.get("supportedReasoningEfforts"))
    levels = [effort["reasoningEffort"] for effort in efforts]
    default = entry.get("defaultReasoningEffort")
    display, description = entry.get("displayName"), entry.get("description")
    return {
        "id": entry["id"],
        "model": entry["model"],
        "displayName": display if isinstance(display, str) and display else entry["model"],
        "description": description if isinstance(description, str) else "",
        "supportedReasoningEfforts": efforts,
        "defaultReasoningEffort": default if default in levels else levels[0],
        "isDefault": entry.get("isDefault") is True,
    }


def model_list(result: Any) -> dict[str, Any]:
    """The runtime's `model/list` result from codex's; raises `ModelListError`."""
    data = result.get("data") if isinstance(result, dict) else None
    if not isinstance(data, list):
        raise ModelListError(INVALID)
    models = [
        _model(entry)
        for entry in data
        if isinstance(entry, dict)
        and isinstance(entry.get("id"), str)
        and entry["id"]
        and isinstance(entry.get("model"), str)
        and entry["model"]
    ]
    if not models:
        raise ModelListError(EMPTY)
    return {"models": models, "selectedOnlyModels": []}
