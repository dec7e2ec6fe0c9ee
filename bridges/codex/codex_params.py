"""Codex request parameters for construction and turns (spec §2.5); standalone `/compact` (§2.6.1) is the kit's.

Pure: the kit decodes the runtime's request once into its protocol type; these build codex's
`thread/start|resume|fork` and `turn/start` params from it in the reference's key order, so what codex receives
matches the recorded `bridge→provider` lane.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from msgspec import UNSET, UnsetType

from bbridge.core import js
from bbridge.wire import protocol

Constructions = protocol.ThreadStartParams | protocol.ThreadResumeParams | protocol.ThreadForkParams

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$", re.IGNORECASE)
LEGACY_CHECKPOINT = re.compile(r"^bt[0-9a-f]{8}-[0-9]+-")
EFFORTS = ("low", "medium", "high", "xhigh", "max", "ultra")
UNSUPPORTED_EFFORTS = ("none", "ultracode")


class ParamsError(ValueError):
    """Options the bridge refuses; the runtime request fails with `-32000` and this text."""


@dataclass(slots=True)
class ProviderOptions:
    """The `options.providerOptions` keys codex reads; others are ignored."""

    memory_enabled: bool = True
    subagents_enabled: bool | None = None
    env_unset: list[str] = field(default_factory=list)
    extra_roots: list[str] = field(default_factory=list)


def provider_options(options: protocol.ExecutionOptions) -> ProviderOptions:
    given: dict[str, Any] = {} if options.providerOptions is UNSET else options.providerOptions
    decoded = ProviderOptions()
    for name in ("memoryEnabled", "providerSubagentsEnabled"):
        if name in given and not isinstance(given[name], bool):
            raise ParamsError(f"providerOptions.{name}: expected boolean")
    for name in ("envUnset", "additionalWorkspaceWriteRoots"):
        value = given.get(name)
        if name in given and not (isinstance(value, list) and all(isinstance(entry, str) for entry in value)):
            raise ParamsError(f"providerOptions.{name}: expected array of strings")
    decoded.memory_enabled = given.get("memoryEnabled", True)
    decoded.subagents_enabled = given.get("providerSubagentsEnabled")
    decoded.env_unset = list(given.get("envUnset", []))
    decoded.extra_roots = list(given.get("additionalWorkspaceWriteRoots", []))
    return decoded


@dataclass(slots=True, frozen=True)
class Permissions:
    approval_policy: str
    reviewer: str
    full: bool


def permissions(options: protocol.ExecutionOptions) -> Permissions:
    """The core permission policy as codex's approval policy, reviewer and sandbox scope."""
    if options.permissionScope == "full":
        return Permissions("never", "user", full=True)
    if options.approvalReviewer == "automatic":
        return Permissions("on-request", "auto_review", full=False)
    if options.permissionEscalation == "deny":
        return Permissions("never", "user", full=False)
    return Permissions("on-request", "user", full=False)


def writable_roots(extra_roots: list[str], git_roots: list[str]) -> list[str]:
    return list(dict.fromkeys([*extra_roots, *git_roots]))


def sandbox_policy(policy: Permissions, roots: list[str]) -> dict[str, Any]:
    if policy.full:
        return {"type": "dangerFullAccess"}
    return {
        "type": "workspaceWrite",
        "writableRoots": roots,
        "networkAccess": True,
        "excludeTmpdirEnvVar": False,
        "excludeSlashTmp": False,
    }


def config(
    bb_thread: str, options: protocol.ExecutionOptions, extra: ProviderOptions, roots: list[str]
) -> dict[str, Any]:
    """The construction's `config` object, keys in the reference's order."""
    result: dict[str, Any] = {"shell_environment_policy.set.BB_THREAD_ID": bb_thread}
    for name, value in ({} if options.envVars is UNSET else options.envVars).items():
        if ENV_NAME.match(name):
            result[f"shell_environment_policy.set.{name}"] = value
    for name in extra.env_unset:
        if ENV_NAME.match(name):
            result.pop(f"shell_environment_policy.set.{name}", None)
            result[f"shell_environment_policy.unset.{name}"] = "1"
    level = options.reasoningLevel
    if isinstance(level, str):
        if level in UNSUPPORTED_EFFORTS:
            raise ParamsError(f"Codex does not support the {level} reasoning level.")
        result["model_reasoning_effort"] = level
    result["features.default_mode_request_user_input"] = False
    if extra.subagents_enabled is False:
        result["features.multi_agent"] = False
        result["features.multi_agent_v2.max_concurrent_threads_per_session"] = 1
    result["memories.use_memories"] = extra.memory_enabled
    result["memories.generate_memories"] = extra.memory_enabled
    if not permissions(options).full and roots:
        result["sandbox_workspace_write.writable_roots"] = roots
    return result


def _shared(params: Constructions, git_roots: list[str]) -> dict[str, Any]:
    options = params.options
    policy, extra = permissions(options), provider_options(options)
    roots = writable_roots(extra.extra_roots, [] if policy.full else git_roots)
    shared: dict[str, Any] = {
        "approvalPolicy": policy.approval_policy,
        "approvalsReviewer": policy.reviewer,
        "sandbox": "danger-full-access" if policy.full else "workspace-write",
        "cwd": params.cwd,
    }
    trimmed = "" if options.instructions is UNSET else js.trim(options.instructions)
    if trimmed and params.instructionMode == "replace":
        shared["baseInstructions"] = trimmed
    elif trimmed and params.instructionMode == "append":
        shared["developerInstructions"] = trimmed
    if options.model is not UNSET:
        shared["model"] = options.model
    if options.serviceTier == "fast":
        shared["serviceTier"] = "fast"
    shared["config"] = config(params.threadId, options, extra, roots)
    tools = [
        {"name": tool.name, "description": tool.description, "inputSchema": tool.inputSchema}
        for tool in ([] if params.dynamicTools is UNSET else params.dynamicTools)
    ]
    if tools:
        shared["dynamicTools"] = tools
    return shared


def construction(params: Constructions, git_roots: list[str] | None = None) -> dict[str, Any]:
    """Codex params for the runtime's `thread/start|resume|fork` request (same method name toward codex)."""
    shared = _shared(params, git_roots or [])
    if isinstance(params, protocol.ThreadResumeParams):
        return {"threadId": params.providerThreadId, **shared}
    if isinstance(params, protocol.ThreadForkParams):
        head: dict[str, Any] = {"threadId": params.sourceProviderThreadId}
        checkpoint: str | UnsetType = params.sourceProviderCheckpointId
        if checkpoint is not UNSET:
            head["lastTurnId"] = LEGACY_CHECKPOINT.sub("", checkpoint, count=1)
        return {**head, **shared}
    return {**shared, "ephemeral": False, "experimentalRawEvents": True}


def user_input(entry: protocol.PromptInput) -> dict[str, Any]:
    """One bb prompt input as codex `UserInput` (mentions and visibility are dropped)."""
    if isinstance(entry, protocol.ImageInput):
        return {"type": "image", "url": entry.url}
    if isinstance(entry, protocol.LocalImageInput):
        return {"type": "localImage", "path": entry.path}
    if isinstance(entry, protocol.LocalFileInput):
        return {"type": "text", "text": f"[Attached file: {entry.path}]", "text_elements": []}
    return {"type": "text", "text": entry.text, "text_elements": []}


def turn(codex_thread: str, params: protocol.TurnStartParams, git_roots: list[str] | None = None) -> dict[str, Any]:
    """Codex `turn/start` params: input and permissions only (no effort, config or instructions)."""
    options = params.options
    policy, extra = permissions(options), provider_options(options)
    roots = writable_roots(extra.extra_roots, [] if policy.full else git_roots or [])
    request: dict[str, Any] = {
        "threadId": codex_thread,
        "input": [user_input(entry) for entry in params.input],
        "approvalPolicy": policy.approval_policy,
        "approvalsReviewer": policy.reviewer,
        "sandboxPolicy": sandbox_policy(policy, roots),
    }
    if options.model is not UNSET:
        request["model"] = options.model
    if options.serviceTier == "fast":
        request["serviceTier"] = "fast"
    return request
