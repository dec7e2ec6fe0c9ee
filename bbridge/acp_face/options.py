"""Pure: a session's Session Config Options (`provider`, `model`, `reasoning`) from the daemon's providers and a
provider's `model/list`, and what choosing a value changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

PROVIDER: Final = "provider"
MODEL: Final = "model"
REASONING: Final = "reasoning"


@dataclass
class Choice:
    """What a session runs on: the provider, its model (None: the provider's default) and reasoning level."""

    provider: str
    model: str | None = None
    effort: str | None = None
    models: list[dict[str, Any]] = field(default_factory=list)  # the provider's `model/list` models

    def model_entry(self) -> dict[str, Any] | None:
        for model in self.models:
            if model.get("id") == self.model:
                return model
        return None

    def settle(self) -> None:
        """The model the provider marks default when none is chosen (or the chosen one is not listed), and an
        effort the model supports (its default when the chosen one is not)."""
        if self.models and self.model_entry() is None:
            default = next((m for m in self.models if m.get("isDefault")), self.models[0])
            self.model = str(default.get("id"))
        efforts = supported_efforts(self.model_entry())
        if self.effort not in efforts:
            entry = self.model_entry() or {}
            default_effort = entry.get("defaultReasoningEffort")
            self.effort = default_effort if default_effort in efforts else (efforts[0] if efforts else None)

    def turn_options(self) -> dict[str, Any]:
        """The bb execution options' model and reasoning level."""
        chosen: dict[str, Any] = {}
        if self.model is not None:
            chosen["model"] = self.model
        if self.effort is not None:
            chosen["reasoningLevel"] = self.effort
        return chosen


def supported_efforts(model: dict[str, Any] | None) -> list[str]:
    return [
        str(e["reasoningEffort"])
        for e in (model or {}).get("supportedReasoningEfforts") or []
        if "reasoningEffort" in e
    ]


def config_options(providers: list[str], choice: Choice) -> list[dict[str, Any]]:
    """The session's `configOptions`: the provider select, the model select when the provider lists models, the
    reasoning select when the chosen model has efforts."""
    options = [
        select(PROVIDER, "Provider", None, choice.provider,
               [{"value": p, "name": p} for p in providers], "The bbridge provider (agent) behind this session"),
    ]  # fmt: skip
    if choice.models and choice.model is not None:
        listed = [
            {"value": str(m.get("id")), "name": str(m.get("displayName") or m.get("id")),
             **({"description": str(m["description"])} if m.get("description") else {})}
            for m in choice.models
        ]  # fmt: skip
        options.append(select(MODEL, "Model", "model", choice.model, listed, "The provider's model"))
    efforts = supported_efforts(choice.model_entry())
    if efforts and choice.effort is not None:
        listed = [{"value": e, "name": e} for e in efforts]
        options.append(select(REASONING, "Reasoning", "thought_level", choice.effort, listed, "The reasoning level"))
    return options


def select(
    ident: str, name: str, category: str | None, current: str, options: list[dict[str, Any]], description: str
) -> dict[str, Any]:
    """One `select` option; `category` (ACP's UX hint) only where one fits: a provider is none of ACP's."""
    built = {"type": "select", "id": ident, "name": name, "description": description, "currentValue": current,
             "options": options}  # fmt: skip
    if category is not None:
        built["category"] = category
    return built
