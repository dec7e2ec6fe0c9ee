"""Codex approval requests as bb `interaction/request`s and the runtime's resolutions back (spec §4.3–§4.6).

Pure: `decode` turns a codex server request into the deltas to emit first (the macOS permission item) and
the `interaction/request` params; `encode` turns the runtime's resolution into codex's answer. Failures
carry the JSON-RPC code the reference answers codex with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from bbridge.core import grammar as g
from bbridge.core import js
from bbridge.wire import interactions as ix

from . import presentation as p
from .fields import ShapeError, need, obj, optional_text, strings, text

COMMAND = "item/commandExecution/requestApproval"
FILE_CHANGE = "item/fileChange/requestApproval"
PERMISSIONS = "item/permissions/requestApproval"
MACOS_KIND = "provider-codex/macos-permission"
MACOS_SUFFIX = ":macos-permission"
DETAIL_LIMIT = 280
ALL_DECISIONS: tuple[ix.Decision, ...] = ("allow_once", "allow_for_session", "deny")
_CODEX_DECISIONS: dict[str, ix.Decision] = {
    "accept": "allow_once",
    "acceptForSession": "allow_for_session",
    "decline": "deny",
    "cancel": "deny",
}
_ANSWERS = {"allow_once": "accept", "allow_for_session": "acceptForSession", "deny": "decline"}
_ACTIONS: dict[str, type[ix.Action]] = {
    "read": ix.ReadAction,
    "listFiles": ix.ListFilesAction,
    "search": ix.SearchAction,
    "unknown": ix.UnknownAction,
}


class ApprovalError(Exception):
    """A request or resolution the bridge refuses; `code` is what codex is answered with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class Approval:
    """What to emit for one codex approval request, and how to answer it later."""

    deltas: list[g.Delta]
    request: ix.InteractionRequestParams
    subject: str


def unhandled_request(method: str) -> ApprovalError:
    return ApprovalError(-32601, f'Unhandled codex request "{method}"')


def decode(method: str, params: Any, bb_thread: str, codex_thread: str | None) -> Approval:
    """The approval for a codex request; raises `ApprovalError` (-32601 unparseable, -32602 undecidable)."""
    try:
        body = obj(params)
        thread, turn, item_id = text(body, "threadId"), text(body, "turnId"), text(body, "itemId")
        if method == COMMAND:
            deltas, payload = _command(body, item_id, turn)
        elif method == FILE_CHANGE:
            deltas, payload = [], _file_change(body, item_id)
        elif method == PERMISSIONS:
            deltas, payload = [], _permissions(body, item_id)
        else:
            raise unhandled_request(method)
    except ShapeError:
        raise unhandled_request(method) from None
    request = ix.InteractionRequestParams(
        providerThreadId=codex_thread or thread,
        threadId=bb_thread,
        turnId=turn,
        payload=payload,
        providerNativeIds=True,
    )
    return Approval(deltas, request, payload.subject.__struct_config__.tag)  # type: ignore[arg-type]


def _grant(value: Any) -> tuple[ix.NetworkGrant | None, ix.FileSystemGrant | None]:
    body = obj(value)
    need("network" in body and "fileSystem" in body)
    network = fs = None
    if body["network"] is not None:
        enabled = obj(body["network"]).get("enabled")
        need(enabled is None or isinstance(enabled, bool))
        network = ix.NetworkGrant(enabled=enabled)
    if body["fileSystem"] is not None:
        lists = obj(body["fileSystem"])
        read, write = lists.get("read"), lists.get("write")
        fs = ix.FileSystemGrant(
            read=strings(read) if read is not None else [], write=strings(write) if write is not None else []
        )
    return network, fs


def _decisions(value: Any) -> list[ix.Decision]:
    if value is None:
        return list(ALL_DECISIONS)
    need(isinstance(value, list))
    if not value:
        raise ApprovalError(-32602, "Command approval requests must include at least one available decision")
    found: list[ix.Decision] = []
    for entry in value:
        if isinstance(entry, dict):
            need(
                len(entry) == 1
                and next(iter(entry)) in ("acceptWithExecpolicyAmendment", "applyNetworkPolicyAmendment")
            )
            continue
        need(isinstance(entry, str) and entry in _CODEX_DECISIONS)
        if _CODEX_DECISIONS[entry] not in found:
            found.append(_CODEX_DECISIONS[entry])
    if not found:
        raise ApprovalError(-32602, "Command approval request did not include provider-neutral decisions")
    return found


def _action(value: Any) -> ix.Action:
    body = obj(value)
    kind = body.get("type")
    need(isinstance(kind, str) and kind in _ACTIONS)
    text(body, "command")
    if kind == "read":
        text(body, "name")
        text(body, "path")
    for name in {"listFiles": ("path",), "search": ("query", "path")}.get(str(kind), ()):
        need(name in body)
        optional_text(body, name)
    fields = {name: body[name] for name in _ACTIONS[str(kind)].__struct_fields__}
    return _ACTIONS[str(kind)](**fields)


def _command(body: dict[str, Any], item_id: str, turn: str) -> tuple[list[g.Delta], ix.ApprovalPayload]:
    reason, command, cwd = optional_text(body, "reason"), optional_text(body, "command"), optional_text(body, "cwd")
    optional_text(body, "approvalId")
    raw_actions = body.get("commandActions")
    need(raw_actions is None or isinstance(raw_actions, list))
    actions = [_action(entry) for entry in raw_actions or []]
    extra = body.get("additionalPermissions")
    network: ix.NetworkGrant | None = None
    fs: ix.FileSystemGrant | None = None
    deltas: list[g.Delta] = []
    if extra is not None:
        network, fs = _grant(extra)
        macos = obj(extra).get("macos")
        if isinstance(macos, dict):
            deltas.append(macos_item(item_id, turn, reason, macos))
    decisions = _decisions(body.get("availableDecisions"))
    if not command:
        raise ApprovalError(-32602, "Command approval request did not include a command subject")
    grantable = (network is not None and network.enabled is True) or (fs is not None and bool(fs.read or fs.write))
    grant = ix.GrantProfile(network=network, fileSystem=fs) if grantable else None
    if not grantable:
        decisions = [decision for decision in decisions if decision != "allow_for_session"]
        if not decisions:
            raise ApprovalError(
                -32602, "Approval request did not include decisions compatible with the requested permissions"
            )
    subject = ix.CommandSubject(itemId=item_id, command=command, cwd=cwd, actions=actions, sessionGrant=grant)  # type: ignore[arg-type]
    return deltas, ix.ApprovalPayload(subject=subject, reason=reason, availableDecisions=decisions)


def _file_change(body: dict[str, Any], item_id: str) -> ix.ApprovalPayload:
    reason, root = optional_text(body, "reason"), optional_text(body, "grantRoot")
    grant = ix.GrantProfile(network=None, fileSystem=ix.FileSystemGrant(read=[], write=[root])) if root else None
    decisions = [d for d in ALL_DECISIONS if grant is not None or d != "allow_for_session"]
    subject = ix.FileChangeSubject(itemId=item_id, writeScope=root, sessionGrant=grant)
    return ix.ApprovalPayload(subject=subject, reason=reason, availableDecisions=decisions)


def _permissions(body: dict[str, Any], item_id: str) -> ix.ApprovalPayload:
    need("reason" in body)
    reason = optional_text(body, "reason")
    network, fs = _grant(body.get("permissions"))
    subject = ix.PermissionGrantSubject(
        itemId=item_id, toolName=None, permissions=ix.GrantProfile(network=network, fileSystem=fs)
    )
    return ix.ApprovalPayload(subject=subject, reason=reason, availableDecisions=list(ALL_DECISIONS))


def _spaced(value: str) -> str:
    return value.replace("_", " ", 1)


def macos_item(item_id: str, turn: str, reason: str | None, macos: dict[str, Any]) -> g.ItemClose:
    """The settled extension item that shows which macOS capabilities codex asked for."""
    automations = macos.get("automations")
    if isinstance(automations, dict) and isinstance(automations.get("bundle_ids"), list):
        automations = {"kind": "bundle_ids", "bundleIds": automations["bundle_ids"]}
    permissions = {
        "preferences": macos.get("preferences"),
        "automations": automations,
        "launchServices": macos.get("launchServices"),
        "accessibility": macos.get("accessibility"),
        "calendar": macos.get("calendar"),
        "reminders": macos.get("reminders"),
        "contacts": macos.get("contacts"),
    }
    lines: list[str] = []
    if isinstance(permissions["preferences"], str) and permissions["preferences"] != "none":
        lines.append(f"preferences ({_spaced(permissions['preferences'])})")
    if automations == "all":
        lines.append("automation of every app")
    elif isinstance(automations, dict):
        ids = automations["bundleIds"]
        lines.append(f"automation of {', '.join(ids) if ids else 'no apps'}")
    flags = (
        ("launchServices", "launch services"),
        ("accessibility", "accessibility"),
        ("calendar", "calendar"),
        ("reminders", "reminders"),
    )
    lines += [label for name, label in flags if permissions[name] is True]
    if isinstance(permissions["contacts"], str) and permissions["contacts"] != "none":
        lines.append(f"contacts ({_spaced(permissions['contacts'])})")
    if lines:
        detail = (
            f"Requested: {', '.join(lines)}. bb cannot grant macOS permissions; the approval covers the command only."
        )
    else:
        detail = "No macOS capability was requested."
    shown = p.make("Requesting macOS permissions", "Requested macOS permissions", "Lock")
    shown.detail = js.limit(detail, DETAIL_LIMIT)
    payload = {"approvalItemId": item_id, "reason": reason, "permissions": permissions}
    close = g.ItemClose(
        key=g.ItemKey(providerItemId=item_id + MACOS_SUFFIX),
        status="completed",
        item=g.ExtensionShape(kind=MACOS_KIND, payload=payload),
        presentation=shown,
    )
    close.providerTurnId = turn
    return close


def encode(subject: str, resolution: Any) -> dict[str, Any]:
    """Codex's answer for the runtime's resolution; raises `ApprovalError` (-32000) when there is none."""
    if isinstance(resolution, dict) and resolution.get("kind") in ("user_answer", "plugin_submitted"):
        raise ApprovalError(-32000, "Codex user-question interactive requests are unsupported")
    if not isinstance(resolution, dict) or resolution.get("decision") not in _ANSWERS:
        raise ApprovalError(-32000, f"Invalid interaction resolution: {js.stringify(resolution)}")
    decision = str(resolution["decision"])
    if subject != "permission_grant":
        return {"decision": _ANSWERS[decision]}
    if decision == "deny":
        return {"permissions": {}, "scope": "turn"}
    granted = resolution.get("grantedPermissions")
    if granted is None:
        raise ApprovalError(-32000, "Permission grant approval must include granted permissions")
    try:
        profile = msgspec.convert(granted, ix.GrantProfile)
    except msgspec.ValidationError as exc:
        raise ApprovalError(-32000, str(exc)) from None
    permissions: dict[str, Any] = {}
    if profile.network is not None:
        permissions["network"] = {"enabled": profile.network.enabled}
    if profile.fileSystem is not None:
        permissions["fileSystem"] = {"read": profile.fileSystem.read or None, "write": profile.fileSystem.write or None}
    return {"permissions": permissions, "scope": "turn" if decision == "allow_once" else "session"}
