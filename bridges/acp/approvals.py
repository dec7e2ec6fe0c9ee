"""ACP `session/request_permission` ↔ bb approval interaction, both ways.

A command asks as a `command` subject, a file change as a `file_change`
subject, everything else (an MCP tool, a read outside the project) as a
`tool_use` subject carrying the presentation its timeline row has. The
runtime's decision goes back as the agent's own option of the matching kind.
The thread's permission mode (`Policy`) decides whether the runtime is asked at
all, and where the agent's file writes may go (`files`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from msgspec import UNSET

from bbridge.core import grammar as g
from bbridge.wire import interactions
from bbridge.wire.interactions import Decision
from bridges.acp.messages import JsonObject
from bridges.acp.presentation import tool_kind
from bridges.acp.tool_shapes import classify, extract_paths, operation

Subject = interactions.CommandSubject | interactions.FileChangeSubject | interactions.ToolUseSubject
CANCELLED: JsonObject = {"outcome": {"outcome": "cancelled"}}
# the option kinds a decision may pick, in preference order
OPTION_KINDS: dict[Decision, tuple[str, ...]] = {
    "allow_once": ("allow_once", "allow_always"),
    "allow_for_session": ("allow_always", "allow_once"),
    "deny": ("reject_once", "reject_always"),
}


@dataclass(frozen=True)
class Policy:
    """`full` allows every permission itself; the other modes ask the runtime and keep writes inside the roots."""

    ask: bool
    write_roots: tuple[str, ...]

    def may_write(self, path: str) -> bool:
        if not self.ask:
            return True
        target = os.path.realpath(path)
        roots = [os.path.realpath(root) for root in self.write_roots]
        return any(os.path.commonpath([target, root]) == root for root in roots)


def decisions(options: Sequence[JsonObject]) -> list[Decision]:
    """The decisions the options allow; a lone odd kind still offers `deny`, so auto-deny can always settle it."""
    kinds = {option["kind"] for option in options}
    found: list[Decision] = []
    if "allow_once" in kinds:
        found.append("allow_once")
    if "allow_always" in kinds:
        found.append("allow_for_session")
    if kinds & {"reject_once", "reject_always"}:
        found.append("deny")
    return found or ["deny"]


def outcome(options: Sequence[JsonObject], decision: Decision | None) -> JsonObject:
    """The `session/request_permission` result for a decision (None, or no matching option: cancelled)."""
    if decision is None:
        return CANCELLED
    for kind in OPTION_KINDS[decision]:
        for option in options:
            if option["kind"] == kind:
                return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
    return CANCELLED


def _own_call(tool_call: JsonObject) -> JsonObject:
    """The permission's own tool call as a translator event (its content is not a write signal)."""
    event: JsonObject = {"sessionUpdate": "tool_call", "toolCallId": tool_call["toolCallId"]}
    event.update((k, tool_call[k]) for k in ("title", "kind", "rawInput", "locations") if k in tool_call)
    return event


def write_scope(paths: Sequence[str]) -> str | None:
    """The one named path that contains every other (a file and its directory), else None."""
    normalized = [os.path.normpath(path).rstrip("/") or "/" for path in paths if path.strip()]
    if not normalized:
        return None
    shortest = min(normalized, key=len)
    prefix = shortest if shortest.endswith("/") else shortest + "/"
    return shortest if all(p == shortest or p.startswith(prefix) for p in normalized) else None


def payload(
    tool_call: JsonObject | None, options: Sequence[JsonObject], started: JsonObject | None
) -> interactions.ApprovalPayload:
    """The approval payload for a permission request; `started` is the in-flight call with the same id, if any."""
    available = decisions(options)
    if tool_call is None or not isinstance(tool_call.get("toolCallId"), str) or not tool_call["toolCallId"]:
        subject: Subject = interactions.ToolUseSubject(
            itemId="acp-permission", tool="tool", presentation=tool_kind(None, "ACP permission request")
        )
        return interactions.ApprovalPayload(subject=subject, reason=None, availableDecisions=available)
    own = _own_call(tool_call)
    op = operation(own)
    if op.kind == "generic" and started is not None:
        op = operation(started)
    item_id = tool_call["toolCallId"]
    if op.kind == "file_change":
        scope = write_scope(extract_paths(own) or op.paths)
        subject = interactions.FileChangeSubject(itemId=item_id, writeScope=scope, sessionGrant=None)
    elif op.kind == "command":
        action = interactions.UnknownAction(command=op.command)
        subject = interactions.CommandSubject(
            itemId=item_id, command=op.command, cwd=None, actions=[action], sessionGrant=None
        )
    else:
        described = classify(own)
        if described.presentation.title is UNSET and started is not None:  # the ask names no headline: the call's
            described = classify(started)
        item = described.item
        if isinstance(item, g.ToolShape):
            tool = item.tool
        else:
            tool = tool_call.get("kind") or (started or {}).get("kind") or str(item.__struct_config__.tag)
        subject = interactions.ToolUseSubject(itemId=item_id, tool=tool, presentation=described.presentation)
    return interactions.ApprovalPayload(subject=subject, reason=None, availableDecisions=available)
