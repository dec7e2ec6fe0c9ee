"""A phase's execution tuple resolved against the calling thread, and checked, before any hidden thread exists.

Blank and `inherit` are explicit defaults (the seed's "Execution settings"): an unchanged provider copies the
caller's model, and its reasoning unless one is configured; another provider with a blank model takes that
provider's default from `model/list` (`isDefault`) and the model's default reasoning unless one is configured;
permission `inherit` copies the caller's permission fields as a group, any other mode is the protocol's fixed
group for it, escalation `deny` (a hidden thread never asks a person to widen its scope). The result is the
whole execution options a hidden thread is started and prompted with, so nothing is re-derived mid-run.

Also fixed here, where the seed is silent:
- a configured model matches a listed model's `id` (or its `model`), in `models` or `selectedOnlyModels`, and is
  sent as that `id`; the caller's own model is not checked against the list (it is running);
- a provider that marks no model default gives its first listed one; an empty or unavailable list leaves the
  model to the provider (no `model` option) and the reasoning to the configured level, if any;
- an inherited reasoning level the resolved model does not support falls back to the model's default, where a
  configured one is an error;
- with `panel`, a member's provider replaces the worker tuple's provider; the worker tuple's model goes only with
  its own provider, its reasoning and permission with every member.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

import msgspec

from bbridge.perspectives.settings import PERMISSION_MODES, PerspectivesConfig, PhaseTuple
from bbridge.wire.protocol import AvailableModel, ExecutionOptions, ModelListResult

PERMISSION_KEYS: Final = ("permissionMode", "permissionScope", "approvalReviewer", "permissionEscalation")
PERMISSION_GROUPS: Final[Mapping[str, Mapping[str, Any]]] = {
    "full": {
        "permissionMode": "full",
        "permissionScope": "full",
        "approvalReviewer": None,
        "permissionEscalation": None,
    },
    "accept-edits": {
        "permissionMode": "accept-edits",
        "permissionScope": "workspace",
        "approvalReviewer": "user",
        "permissionEscalation": "deny",
    },
    "auto": {
        "permissionMode": "auto",
        "permissionScope": "workspace",
        "approvalReviewer": "automatic",
        "permissionEscalation": "deny",
    },
}

Providers = Mapping[str, ModelListResult | None]  # each available provider's `model/list` (None: unavailable)


class TupleError(ValueError):
    """A phase tuple that cannot run; the message names the field, the value and what is available."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Caller:
    """The calling thread: its provider, resolved model and reasoning (None: not known), and the execution
    `options` its client last sent (the protocol's ExecutionOptions shape)."""

    provider_id: str
    model: str | None
    reasoning: str | None
    options: Mapping[str, Any]


@dataclass(frozen=True)
class Resolved:
    """A hidden thread's execution: `options` is sent whole on `thread/start` and every `turn/start`."""

    provider_id: str
    model: str | None
    reasoning: str | None
    options: dict[str, Any]


@dataclass(frozen=True)
class Phases:
    """A call's tuples: `planner` runs the planner and the synthesis; `workers` is help's one expert (the worker
    tuple), or a panel's worker per lens in lens order (the worker tuple, or with `panel` its providers in turn)."""

    planner: Resolved
    workers: tuple[Resolved, ...]


def model_list(raw: Any) -> ModelListResult | None:
    """A `model/list` result as the client returned it, or None when it does not read as one (unavailable)."""
    try:
        return msgspec.convert(raw, ModelListResult)
    except msgspec.ValidationError:
        return None


def resolve_phases(config: PerspectivesConfig, caller: Caller, providers: Providers, lenses: int = 0) -> Phases:
    """The tuples a call runs, resolved and checked: help's (`lenses` 0) or a panel's; the first problem as a
    `TupleError`. A panel's workers do not check the worker tuple's own provider when `panel` replaces it."""
    planner = resolve(config.planner, caller, providers, where="planner")
    if not lenses or not config.panel:
        worker = resolve(config.worker, caller, providers, where="worker")
        return Phases(planner, (worker,) * max(lenses, 1))
    own = config.worker.provider or caller.provider_id  # the worker tuple's model is this provider's
    members = [
        resolve(
            replace(config.worker, provider=provider, model=config.worker.model if provider == own else None),
            caller,
            providers,
            where=f"panel[{index}]",
        )
        for index, provider in enumerate(config.panel[:lenses])
    ]
    return Phases(planner, tuple(members[i % len(members)] for i in range(lenses)))


def resolve(phase: PhaseTuple, caller: Caller, providers: Providers, *, where: str) -> Resolved:
    """One tuple resolved; `where` names it in a `TupleError` (`worker`, `panel[2]`)."""
    provider = phase.provider or caller.provider_id
    if provider not in providers:
        given = "the calling thread's provider " if phase.provider is None else ""
        raise TupleError(f"{where}.provider", f"{given}{provider!r} is not available (providers: {_names(providers)})")
    listing = providers[provider]
    same = provider == caller.provider_id
    model: str | None
    if phase.model is not None:
        entry = _find(listing, phase.model)
        if listing is not None and entry is None:
            listed = _names({m.id: m for m in (*listing.models, *listing.selectedOnlyModels)})
            raise TupleError(f"{where}.model", f"{phase.model!r} is not a model of {provider} (models: {listed})")
        model = entry.id if entry is not None else phase.model
    elif same and caller.model:
        model, entry = caller.model, _find(listing, caller.model)
    else:
        entry = _default(listing)
        model = entry.id if entry is not None else None
    efforts = [e.reasoningEffort for e in entry.supportedReasoningEfforts] if entry is not None else None
    if phase.reasoning is not None:
        if efforts is not None and phase.reasoning not in efforts:
            supported = ", ".join(efforts) or "none"
            raise TupleError(
                f"{where}.reasoning",
                f"{phase.reasoning!r} is not supported by {provider} model {model} (supported: {supported})",
            )
        reasoning: str | None = phase.reasoning
    elif same and caller.reasoning and (efforts is None or caller.reasoning in efforts):
        reasoning = caller.reasoning
    else:
        reasoning = entry.defaultReasoningEffort if entry is not None else None
    options: dict[str, Any] = {}
    if model is not None:
        options["model"] = model
    if reasoning is not None:
        options["reasoningLevel"] = reasoning
    options.update(_permission(phase, caller, where))
    return Resolved(provider, model, reasoning, options)


def _permission(phase: PhaseTuple, caller: Caller, where: str) -> dict[str, Any]:
    """The permission group: the mode's fixed one, or the caller's copied (and checked against the protocol)."""
    if phase.permission is not None:
        if phase.permission not in PERMISSION_GROUPS:
            known = ", ".join(PERMISSION_MODES)
            raise TupleError(f"{where}.permission", f"{phase.permission!r} is not a permission mode (modes: {known})")
        return dict(PERMISSION_GROUPS[phase.permission])
    group = {key: caller.options[key] for key in PERMISSION_KEYS if key in caller.options}
    try:
        msgspec.convert(group, ExecutionOptions)
    except msgspec.ValidationError as exc:
        mode = group.get("permissionMode")
        raise TupleError(
            f"{where}.permission",
            f"inherit: the calling thread's permission mode {mode!r} is not usable ({exc}; modes: "
            f"{', '.join(PERMISSION_MODES)})",
        ) from None
    return group


def _find(listing: ModelListResult | None, model: str) -> AvailableModel | None:
    """The listed model `model` names, by `id` first, then by `model`."""
    if listing is None:
        return None
    every = (*listing.models, *listing.selectedOnlyModels)
    return next((m for m in every if m.id == model), None) or next((m for m in every if m.model == model), None)


def _default(listing: ModelListResult | None) -> AvailableModel | None:
    """The provider's declared default model, else its first listed one (None: the provider chooses)."""
    if listing is None or not listing.models:
        return None
    return next((m for m in listing.models if m.isDefault), listing.models[0])


def _names(items: Mapping[str, object]) -> str:
    return ", ".join(sorted(items)) or "none"
