"""`model/list` from pi's available models (pi-bridge.md [M4], [M5]): pi's Model objects → bb model entries.

The models come from `get_available_models` (pi's models with configured auth, in pi's order); each entry's
reasoning efforts follow pi-ai's supported thinking levels, and the default is the provider's default of the
table below, else the first listed model.
"""

from __future__ import annotations

import re
from typing import Any

Json = dict[str, Any]

LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh", "max")
EFFORTS = (
    ("off", "none", "No extended thinking"),
    ("low", "low", "Low reasoning effort"),
    ("medium", "medium", "Medium reasoning effort"),
    ("high", "high", "High reasoning effort"),
    ("xhigh", "xhigh", "Extra high reasoning effort"),
    ("max", "max", "Maximum reasoning effort"),
)
PROVIDER_DEFAULTS = {
    "anthropic": "claude-opus-4-8",
    "openai": "gpt-5.4",
    "openai-codex": "gpt-5.6-sol",
    "amazon-bedrock": "us.anthropic.claude-opus-4-8",
    "google": "gemini-2.5-pro",
    "google-gemini-cli": "gemini-2.5-pro",
    "google-vertex": "gemini-3-pro-preview",
    "openrouter": "openai/gpt-5.1-codex",
    "vercel-ai-gateway": "anthropic/claude-opus-4.8",
    "xai": "grok-4-fast-non-reasoning",
    "mistral": "devstral-medium-latest",
}
DATED = re.compile(r"-\d{8}$")


def thinking_levels(model: Json) -> list[str]:
    """pi-ai's supported levels: only `off` without reasoning; `xhigh`/`max` only when the map names them."""
    if not model.get("reasoning"):
        return ["off"]
    mapping = model.get("thinkingLevelMap")
    mapping = mapping if isinstance(mapping, dict) else {}
    return [
        level
        for level in LEVELS
        if not (level in mapping and mapping[level] is None) and (level not in ("xhigh", "max") or level in mapping)
    ]


def entry(model: Json) -> Json:
    levels = thinking_levels(model)
    efforts = [{"reasoningEffort": bb, "description": text} for pi, bb, text in EFFORTS if pi in levels]
    efforts = efforts or [{"reasoningEffort": "none", "description": EFFORTS[0][2]}]
    names = [e["reasoningEffort"] for e in efforts]
    default = "medium" if "medium" in names else next((n for n in names if n != "none"), names[0])
    provider = str(model["provider"])
    caps = "reasoning" if model.get("reasoning") else "non-reasoning"
    multimodal = ", multimodal" if "image" in (model.get("input") or []) else ""
    canonical = f"{provider}/{model['id']}"
    return {
        "id": canonical,
        "model": canonical,
        "displayName": model["name"],
        "routeProviderId": provider,
        "description": f"{provider[:1].upper()}{provider[1:]} {caps}{multimodal} model via Pi",
        "supportedReasoningEfforts": efforts,
        "defaultReasoningEffort": default,
        "isDefault": False,
    }


def complete(model: Any) -> bool:
    return (
        isinstance(model, dict)
        and isinstance(model.get("id"), str)
        and bool(model["id"])
        and isinstance(model.get("provider"), str)
        and bool(model["provider"])
        and isinstance(model.get("name"), str)
    )


def model_list(models: list[Any]) -> tuple[Json, list[str]]:
    """The `model/list` result, and the providers of incomplete models that were skipped (for stderr)."""
    skipped = [str(m.get("provider")) if isinstance(m, dict) else "unknown" for m in models if not complete(m)]
    listed: list[Json] = []
    selected_only: list[Json] = []
    for model in filter(complete, models):
        shown = entry(model)
        dated = DATED.search(model["id"]) is not None and not model["id"].endswith("-latest")
        (selected_only if dated else listed).append(shown)
    if listed:
        default = next(
            (e for e in listed if e["id"] == f"{e['routeProviderId']}/{PROVIDER_DEFAULTS.get(e['routeProviderId'])}"),
            None,
        )
        (default or listed[0])["isDefault"] = True
    return {"models": listed, "selectedOnlyModels": selected_only}, skipped
