"""Codex approvals both ways (spec §4.3–§4.6): the recorded `approval-allow` exchange byte for byte, and
the [unverified] file-change, permission and macOS rules.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bbridge.core import js
from bbridge.wire.lanes import (
    BRIDGE_TO_PROVIDER,
    BRIDGE_TO_RUNTIME,
    PROVIDER_TO_BRIDGE,
    RUNTIME_TO_BRIDGE,
    read_cell,
)
from bridges.codex import approvals
from bridges.codex.session import delta_params

CELL = Path(__file__).resolve().parents[2] / "shared" / "recordings" / "codex" / "approval-allow"
BASE = {"threadId": "th", "turnId": "tu", "itemId": "it"}


def lines(direction: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = [js.parse(e.line) for e in read_cell(CELL) if e.dir == direction]
    return found


@pytest.mark.skipif(not CELL.exists(), reason="no recordings")
def test_the_recorded_command_approval_round_trip() -> None:
    (asked,) = [m for m in lines(PROVIDER_TO_BRIDGE) if m.get("method") == approvals.COMMAND]
    (relayed,) = [m for m in lines(BRIDGE_TO_RUNTIME) if m.get("method") == "interaction/request"]
    bb_thread = relayed["params"]["threadId"]
    approval = approvals.decode(asked["method"], asked["params"], bb_thread, relayed["params"]["providerThreadId"])
    assert approval.deltas == []
    assert msgspec.json.encode(approval.request).decode() == js.stringify(relayed["params"])
    (answer,) = [m for m in lines(RUNTIME_TO_BRIDGE) if m.get("id") == relayed["id"] and "result" in m]
    (written,) = [m for m in lines(BRIDGE_TO_PROVIDER) if m.get("id") == asked["id"] and "result" in m]
    assert approvals.encode(approval.subject, answer["result"]) == written["result"]


def request(method: str, **params: Any) -> dict[str, Any]:
    approval = approvals.decode(method, {**BASE, **params}, "thr_b", None)
    shown: dict[str, Any] = json.loads(msgspec.json.encode(approval.request))
    return shown


def test_command_decisions_and_session_grants() -> None:
    plain = request(approvals.COMMAND, command="ls", commandActions=None)["payload"]
    assert plain["availableDecisions"] == ["allow_once", "deny"] and plain["subject"]["sessionGrant"] is None
    extra = {"network": {"enabled": True}, "fileSystem": None}
    granted = request(
        approvals.COMMAND,
        command="ls",
        additionalPermissions=extra,
        availableDecisions=["acceptForSession", "decline", "cancel"],
    )
    assert granted["payload"]["availableDecisions"] == ["allow_for_session", "deny"]
    assert granted["payload"]["subject"]["sessionGrant"] == {"network": {"enabled": True}, "fileSystem": None}
    assert granted["providerThreadId"] == "th"
    actions = [{"type": "search", "command": "rg x", "query": "x", "path": None, "extra": 1}]
    assert request(approvals.COMMAND, command="rg x", commandActions=actions)["payload"]["subject"]["actions"] == [
        {"type": "search", "command": "rg x", "query": "x", "path": None}
    ]


@pytest.mark.parametrize(
    ("params", "code", "message"),
    [
        (
            {"command": "ls", "availableDecisions": []},
            -32602,
            "Command approval requests must include at least one available decision",
        ),
        (
            {"command": "ls", "availableDecisions": [{"acceptWithExecpolicyAmendment": {}}]},
            -32602,
            "Command approval request did not include provider-neutral decisions",
        ),
        ({"command": ""}, -32602, "Command approval request did not include a command subject"),
        (
            {"command": "ls", "availableDecisions": ["acceptForSession"]},
            -32602,
            "Approval request did not include decisions compatible with the requested permissions",
        ),
        (
            {"command": "ls", "commandActions": [{"type": "write", "command": "x"}]},
            -32601,
            f'Unhandled codex request "{approvals.COMMAND}"',
        ),
    ],
)
def test_command_refusals(params: dict[str, Any], code: int, message: str) -> None:
    with pytest.raises(approvals.ApprovalError) as caught:
        approvals.decode(approvals.COMMAND, {**BASE, **params}, "thr_b", "codex")
    assert (caught.value.code, caught.value.message) == (code, message)


def test_file_change_and_permission_requests() -> None:
    rooted = request(approvals.FILE_CHANGE, reason=None, grantRoot="/w")["payload"]
    assert rooted["subject"] == {
        "kind": "file_change",
        "itemId": "it",
        "writeScope": "/w",
        "sessionGrant": {"network": None, "fileSystem": {"read": [], "write": ["/w"]}},
    }
    assert request(approvals.FILE_CHANGE)["payload"]["availableDecisions"] == ["allow_once", "deny"]
    asked = request(
        approvals.PERMISSIONS, reason="net", permissions={"network": {"enabled": True}, "fileSystem": None}
    )["payload"]
    assert asked["subject"]["kind"] == "permission_grant" and asked["availableDecisions"] == [
        "allow_once",
        "allow_for_session",
        "deny",
    ]


def test_resolutions_back_to_codex() -> None:
    assert approvals.encode("command", {"decision": "deny"}) == {"decision": "decline"}
    assert approvals.encode("file_change", {"decision": "allow_for_session", "grantedPermissions": None}) == {
        "decision": "acceptForSession"
    }
    assert approvals.encode("permission_grant", {"decision": "deny"}) == {"permissions": {}, "scope": "turn"}
    granted = {
        "decision": "allow_for_session",
        "grantedPermissions": {"network": None, "fileSystem": {"read": [], "write": ["/w"]}},
    }
    assert approvals.encode("permission_grant", granted) == {
        "permissions": {"fileSystem": {"read": None, "write": ["/w"]}},
        "scope": "session",
    }
    for bad, message in [
        (
            {"decision": "allow_once", "grantedPermissions": None},
            "Permission grant approval must include granted permissions",
        ),
        ({"kind": "user_answer", "answers": {}}, "Codex user-question interactive requests are unsupported"),
    ]:
        with pytest.raises(approvals.ApprovalError, match=message):
            approvals.encode("permission_grant", bad)


def test_the_macos_permission_item_precedes_the_request() -> None:
    macos = {
        "preferences": "read_write",
        "automations": {"bundle_ids": ["com.a"]},
        "launchServices": True,
        "accessibility": False,
        "calendar": False,
        "reminders": False,
        "contacts": "none",
    }
    extra = {"network": None, "fileSystem": None, "macos": macos}
    approval = approvals.decode(
        approvals.COMMAND, {**BASE, "command": "ls", "additionalPermissions": extra}, "thr_b", None
    )
    (item,) = json.loads(delta_params("thr_b", approval.deltas))["deltas"]
    assert item["key"] == {"providerItemId": "it:macos-permission"}
    assert item["item"]["payload"]["permissions"]["automations"] == {"kind": "bundle_ids", "bundleIds": ["com.a"]}
    assert item["presentation"]["detail"] == (
        "Requested: preferences (read write), automation of com.a, launch services. bb cannot grant macOS permissions; the approval covers the command only."
    )
    assert list(item) == ["kind", "key", "status", "item", "presentation", "providerTurnId"]
