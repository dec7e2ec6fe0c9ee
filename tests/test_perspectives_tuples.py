"""A phase tuple resolved against the calling thread (issue 48, the seed's "Execution settings"): blank and
`inherit` copy the caller's resolved values, another provider's blank model is its `model/list` default, the
permission group is the caller's or the mode's fixed one; and every problem is a `TupleError` naming the field,
the value and what is available, raised before anything could be started."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from bbridge.perspectives.settings import PerspectivesConfig, PhaseTuple
from bbridge.perspectives.tuples import (
    PERMISSION_GROUPS,
    Caller,
    Providers,
    Resolved,
    TupleError,
    model_list,
    resolve,
    resolve_phases,
)
from bbridge.wire.protocol import AutoOptions, ExecutionOptions, FullOptions, ModelListResult


def model(id_: str, efforts: list[str], default: str, *, is_default: bool = False) -> dict[str, Any]:
    return {
        "id": id_,
        "model": f"{id_}-resolved",
        "displayName": id_.title(),
        "description": "",
        "supportedReasoningEfforts": [{"reasoningEffort": e, "description": e} for e in efforts],
        "defaultReasoningEffort": default,
        "isDefault": is_default,
    }


def listing(*models: dict[str, Any], selected_only: list[dict[str, Any]] | None = None) -> ModelListResult:
    result = model_list({"models": list(models), "selectedOnlyModels": selected_only or []})
    assert result is not None
    return result


PROVIDERS: Providers = {
    "claude-code": listing(
        model("opus", ["low", "medium", "high", "max"], "high"),
        model("sonnet", ["low", "medium", "high"], "medium", is_default=True),
        selected_only=[model("claude-3-haiku", [], "none")],
    ),
    "codex": listing(
        model("gpt-5", ["low", "medium", "high", "xhigh"], "medium", is_default=True),
        model("gpt-5-mini", ["low", "medium"], "low"),
    ),
    "pi": listing(model("pi/first", ["none", "low"], "none"), model("pi/second", ["low"], "low")),  # no default
    "opaque": None,  # its model/list is unavailable
    "empty": listing(),
}
ACCEPT_EDITS_ASK = {
    "permissionMode": "accept-edits",
    "permissionScope": "workspace",
    "approvalReviewer": "user",
    "permissionEscalation": "ask",
}
CALLER = Caller(
    "claude-code",
    "opus",
    "max",
    {**ACCEPT_EDITS_ASK, "model": "opus", "reasoningLevel": "max", "instructions": "Be terse.", "tools": {}},
)


def run(phase: PhaseTuple, caller: Caller = CALLER, providers: Providers = PROVIDERS) -> Resolved:
    return resolve(phase, caller, providers, where="worker")


def error(phase: PhaseTuple, caller: Caller = CALLER, providers: Providers = PROVIDERS) -> str:
    with pytest.raises(TupleError) as raised:
        run(phase, caller, providers)
    return str(raised.value)


def valid(options: dict[str, Any]) -> ExecutionOptions:
    """The options as the protocol reads them: each resolution is a valid ExecutionOptions."""
    read: ExecutionOptions = msgspec.convert(options, ExecutionOptions)
    return read


# -- inheriting -------------------------------------------------------------------------


def test_all_inherit_copies_the_callers_tuple_and_permission_group() -> None:
    resolved = run(PhaseTuple())
    assert resolved == Resolved(
        "claude-code", "opus", "max", {"model": "opus", "reasoningLevel": "max", **ACCEPT_EDITS_ASK}
    )
    valid(resolved.options)


def test_options_never_carry_the_callers_instructions_or_tools() -> None:
    options = run(PhaseTuple()).options
    assert "instructions" not in options and "tools" not in options


def test_same_provider_configured_reasoning_overrides_the_callers() -> None:
    assert run(PhaseTuple(reasoning="low")).reasoning == "low"


def test_same_provider_explicitly_named_still_copies_model_and_reasoning() -> None:
    resolved = run(PhaseTuple(provider="claude-code"))
    assert (resolved.model, resolved.reasoning) == ("opus", "max")


def test_same_provider_another_model_keeps_the_callers_reasoning_when_supported() -> None:
    caller = Caller("claude-code", "opus", "high", ACCEPT_EDITS_ASK)
    resolved = run(PhaseTuple(model="sonnet"), caller)
    assert (resolved.model, resolved.reasoning) == ("sonnet", "high")


def test_an_inherited_reasoning_the_model_lacks_falls_back_to_its_default() -> None:
    resolved = run(PhaseTuple(model="sonnet"))  # the caller's `max`: sonnet lists low, medium, high
    assert (resolved.model, resolved.reasoning) == ("sonnet", "medium")


def test_a_caller_without_a_known_model_gets_the_providers_default() -> None:
    caller = Caller("claude-code", None, None, ACCEPT_EDITS_ASK)
    resolved = run(PhaseTuple(), caller)
    assert (resolved.model, resolved.reasoning) == ("sonnet", "medium")


def test_the_callers_own_model_is_not_checked_against_the_list() -> None:
    caller = Caller("claude-code", "claude-opus-4-5-20251101", "high", ACCEPT_EDITS_ASK)
    resolved = run(PhaseTuple(), caller)
    assert (resolved.model, resolved.reasoning) == ("claude-opus-4-5-20251101", "high")


def test_same_provider_with_an_unavailable_list_copies_the_caller() -> None:
    caller = Caller("opaque", "m1", "high", ACCEPT_EDITS_ASK)
    assert run(PhaseTuple(), caller).options == {"model": "m1", "reasoningLevel": "high", **ACCEPT_EDITS_ASK}


# -- another provider -------------------------------------------------------------------


def test_another_provider_with_a_blank_model_takes_its_default_and_that_models_reasoning() -> None:
    resolved = run(PhaseTuple(provider="codex"))
    assert resolved == Resolved(
        "codex", "gpt-5", "medium", {"model": "gpt-5", "reasoningLevel": "medium", **ACCEPT_EDITS_ASK}
    )


def test_another_provider_never_takes_the_callers_reasoning() -> None:
    assert run(PhaseTuple(provider="codex", model="gpt-5-mini")).reasoning == "low"  # not the caller's `max`


def test_another_provider_with_configured_reasoning() -> None:
    assert run(PhaseTuple(provider="codex", reasoning="xhigh")).options["reasoningLevel"] == "xhigh"


def test_a_provider_without_a_declared_default_gives_its_first_model() -> None:
    resolved = run(PhaseTuple(provider="pi"))
    assert (resolved.model, resolved.reasoning) == ("pi/first", "none")


@pytest.mark.parametrize("provider", ["opaque", "empty"])
def test_a_provider_whose_models_are_unknown_chooses_its_own(provider: str) -> None:
    resolved = run(PhaseTuple(provider=provider, reasoning="high"))
    assert resolved == Resolved(provider, None, "high", {"reasoningLevel": "high", **ACCEPT_EDITS_ASK})
    assert run(PhaseTuple(provider=provider)).options == ACCEPT_EDITS_ASK


def test_an_unknown_list_takes_any_model_and_reasoning() -> None:
    resolved = run(PhaseTuple(provider="opaque", model="whatever", reasoning="ultra"))
    assert (resolved.model, resolved.reasoning) == ("whatever", "ultra")


def test_a_model_named_by_its_model_field_is_sent_as_its_id() -> None:
    assert run(PhaseTuple(provider="codex", model="gpt-5-mini-resolved")).model == "gpt-5-mini"


def test_a_selected_only_model_is_available() -> None:
    resolved = run(PhaseTuple(model="claude-3-haiku"))
    assert (resolved.model, resolved.reasoning) == ("claude-3-haiku", "none")


# -- permission ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["full", "accept-edits", "auto"])
def test_a_configured_permission_is_the_modes_fixed_group(mode: str) -> None:
    options = run(PhaseTuple(permission=mode)).options  # type: ignore[arg-type]
    assert {key: options[key] for key in PERMISSION_GROUPS[mode]} == PERMISSION_GROUPS[mode]
    assert options["permissionMode"] == mode
    valid(options)


def test_the_fixed_groups_never_ask_a_person_to_escalate() -> None:
    assert PERMISSION_GROUPS["full"]["permissionEscalation"] is None
    assert PERMISSION_GROUPS["accept-edits"]["permissionEscalation"] == "deny"
    assert PERMISSION_GROUPS["auto"]["permissionEscalation"] == "deny"
    assert isinstance(valid(run(PhaseTuple(permission="auto")).options), AutoOptions)
    full = valid(run(PhaseTuple(permission="full")).options)
    assert isinstance(full, FullOptions) and full.approvalReviewer is None


def test_inherit_copies_the_callers_group_whole() -> None:
    full = {"permissionMode": "full", "permissionScope": "full", "approvalReviewer": None, "permissionEscalation": None}
    caller = Caller("codex", "gpt-5", "high", {**full, "model": "gpt-5"})
    assert run(PhaseTuple(), caller).options == {"model": "gpt-5", "reasoningLevel": "high", **full}


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        ({}, "None"),
        ({"permissionMode": "yolo", "permissionScope": "full"}, "'yolo'"),
        ({"permissionMode": "auto", "permissionScope": "full", "approvalReviewer": "automatic"}, "'auto'"),
    ],
    ids=["missing", "unknown", "inconsistent"],
)
def test_an_unusable_inherited_permission_is_an_error(options: dict[str, Any], shown: str) -> None:
    message = error(PhaseTuple(), Caller("codex", "gpt-5", None, options))
    assert message.startswith(f"worker.permission: inherit: the calling thread's permission mode {shown} is not usable")
    assert message.endswith("modes: full, accept-edits, auto)")


def test_an_unknown_configured_permission_is_an_error() -> None:
    message = error(PhaseTuple(permission="read-only"))  # type: ignore[arg-type]  # as if not read from the file
    assert message == "worker.permission: 'read-only' is not a permission mode (modes: full, accept-edits, auto)"


# -- errors -------------------------------------------------------------------------------


def test_an_unknown_provider_names_the_available_ones() -> None:
    assert error(PhaseTuple(provider="gemini")) == (
        "worker.provider: 'gemini' is not available (providers: claude-code, codex, empty, opaque, pi)"
    )


def test_a_caller_on_a_provider_no_longer_available_is_named_as_such() -> None:
    message = error(PhaseTuple(), Caller("gone", "m", None, ACCEPT_EDITS_ASK))
    assert message.startswith("worker.provider: the calling thread's provider 'gone' is not available (providers: ")


def test_an_unknown_model_names_the_providers_models() -> None:
    assert error(PhaseTuple(provider="codex", model="gpt-4")) == (
        "worker.model: 'gpt-4' is not a model of codex (models: gpt-5, gpt-5-mini)"
    )
    assert error(PhaseTuple(model="haiku")) == (
        "worker.model: 'haiku' is not a model of claude-code (models: claude-3-haiku, opus, sonnet)"
    )


def test_an_unsupported_reasoning_names_the_supported_ones() -> None:
    assert error(PhaseTuple(provider="codex", model="gpt-5-mini", reasoning="high")) == (
        "worker.reasoning: 'high' is not supported by codex model gpt-5-mini (supported: low, medium)"
    )
    assert error(PhaseTuple(model="claude-3-haiku", reasoning="low")) == (
        "worker.reasoning: 'low' is not supported by claude-code model claude-3-haiku (supported: none)"
    )


def test_the_error_carries_its_field() -> None:
    with pytest.raises(TupleError) as raised:
        resolve(PhaseTuple(provider="nope"), CALLER, PROVIDERS, where="planner")
    assert raised.value.field == "planner.provider" and isinstance(raised.value, ValueError)


def test_model_list_reads_a_client_answer_or_gives_none() -> None:
    assert model_list({"models": [{"id": "fake-1"}], "selectedOnlyModels": []}) is None  # incomplete entries
    assert model_list("nope") is None
    read = model_list({"models": [model("m", ["low"], "low", is_default=True)], "extra": 1})
    assert read is not None and read.models[0].isDefault


# -- both phases, the panel ---------------------------------------------------------------


def test_both_phases_resolve_and_members_follow_the_worker_tuple() -> None:
    config = PerspectivesConfig(
        planner=PhaseTuple(provider="codex", permission="full"), worker=PhaseTuple(reasoning="low")
    )
    phases = resolve_phases(config, CALLER, PROVIDERS, lenses=3)
    assert phases.planner.provider_id == "codex" and phases.planner.options["permissionMode"] == "full"
    worker = Resolved("claude-code", "opus", "low", {"model": "opus", "reasoningLevel": "low", **ACCEPT_EDITS_ASK})
    assert phases.workers == (worker,) * 3


def test_help_resolves_the_planner_and_one_expert_from_the_worker_tuple() -> None:
    config = PerspectivesConfig(worker=PhaseTuple(provider="codex"), panel=("pi",))
    phases = resolve_phases(config, CALLER, PROVIDERS)
    assert [w.provider_id for w in phases.workers] == ["codex"]  # the panel is not help's
    assert phases.planner.provider_id == "claude-code"


@pytest.mark.parametrize("field", ["planner", "worker"])
def test_either_phase_failing_fails_the_call_naming_its_phase(field: str) -> None:
    ghost = PhaseTuple(provider="ghost")
    config = PerspectivesConfig(planner=ghost) if field == "planner" else PerspectivesConfig(worker=ghost)
    with pytest.raises(TupleError, match=rf"^{field}\.provider: 'ghost' is not available"):
        resolve_phases(config, CALLER, PROVIDERS, lenses=2)


def test_panel_members_take_the_providers_in_turn_with_their_defaults() -> None:
    config = PerspectivesConfig(panel=("claude-code", "codex", "pi"))
    members = resolve_phases(config, CALLER, PROVIDERS, lenses=5).workers
    assert [(m.provider_id, m.model, m.reasoning) for m in members] == [
        ("claude-code", "opus", "max"),  # the caller's provider: the caller's model and reasoning
        ("codex", "gpt-5", "medium"),
        ("pi", "pi/first", "none"),
        ("claude-code", "opus", "max"),
        ("codex", "gpt-5", "medium"),
    ]
    for member in members:
        assert {k: member.options[k] for k in ACCEPT_EDITS_ASK} == ACCEPT_EDITS_ASK
        valid(member.options)


def test_the_worker_tuples_model_goes_only_with_its_own_provider() -> None:
    config = PerspectivesConfig(
        worker=PhaseTuple(provider="codex", model="gpt-5-mini", permission="auto"), panel=("codex", "claude-code")
    )
    phases = resolve_phases(config, CALLER, PROVIDERS, lenses=2)
    assert [(m.provider_id, m.model) for m in phases.workers] == [("codex", "gpt-5-mini"), ("claude-code", "opus")]
    assert all(m.options["permissionMode"] == "auto" for m in phases.workers)
    assert resolve_phases(config, CALLER, PROVIDERS).workers[0].model == "gpt-5-mini"  # help's expert


def test_a_bad_panel_entry_is_named_by_its_place() -> None:
    config = PerspectivesConfig(panel=("codex", "ghost"))
    with pytest.raises(TupleError) as raised:
        resolve_phases(config, CALLER, PROVIDERS, lenses=2)
    assert str(raised.value) == (
        "panel[1].provider: 'ghost' is not available (providers: claude-code, codex, empty, opaque, pi)"
    )


def test_a_panel_reasoning_a_member_does_not_support_is_an_error() -> None:
    config = PerspectivesConfig(worker=PhaseTuple(reasoning="xhigh"), panel=("codex", "pi"))
    with pytest.raises(TupleError, match=r"^panel\[1\]\.reasoning: 'xhigh' is not supported by pi model pi/first"):
        resolve_phases(config, CALLER, PROVIDERS, lenses=2)


def test_a_panel_reasoning_the_worker_tuples_own_provider_lacks_is_an_error_for_help_only() -> None:
    config = PerspectivesConfig(worker=PhaseTuple(reasoning="xhigh"), panel=("codex",))
    assert resolve_phases(config, CALLER, PROVIDERS, lenses=2).workers[0].reasoning == "xhigh"
    with pytest.raises(TupleError, match=r"^worker\.reasoning: 'xhigh' is not supported by claude-code model opus"):
        resolve_phases(config, CALLER, PROVIDERS)


def test_only_the_panel_entries_a_call_uses_are_resolved() -> None:
    config = PerspectivesConfig(panel=("codex", "pi", "ghost"))
    assert len(resolve_phases(config, CALLER, PROVIDERS, lenses=2).workers) == 2
