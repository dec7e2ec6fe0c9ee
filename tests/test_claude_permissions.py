"""The `can_use_tool` policy and interaction codec (spec §5) against the recorded approvals and by rule.

For each recorded cell with an interaction, the CLI's `can_use_tool` request goes through `decide`; the
forwarded payload must equal the recorded `interaction/request` payload, and the runtime's recorded answer must
encode to the recorded control response body.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bbridge.wire import interactions
from bbridge.wire.lanes import (
    BRIDGE_TO_PROVIDER,
    PROVIDER_TO_BRIDGE,
    RUNTIME_TO_BRIDGE,
    bridge_lane,
    lane_path,
    read_lane,
)
from bridges.claude_code import approvals as perm
from tests.conftest import missing_reason, shared_path

CELLS = shared_path("recordings", "claude-code")
MODES = {"accept-edits": "acceptEdits", "auto": "auto", "full": "bypassPermissions"}


def _lines(cell: Path, direction: str) -> list[dict[str, Any]]:
    return [json.loads(e.line) for e in read_lane(lane_path(cell, direction), direction)]


@pytest.mark.skipif(CELLS is None, reason=missing_reason("recordings", "claude-code"))
@pytest.mark.parametrize("name", ["approval-allow", "approval-deny", "user-question"])
def test_recorded_interactions_round_trip(name: str) -> None:
    assert CELLS is not None
    cell = CELLS / name
    runtime = _lines(cell, RUNTIME_TO_BRIDGE)
    options = next(m for m in runtime if m.get("method") == "thread/start")["params"]["options"]
    request = next(m for m in _lines(cell, PROVIDER_TO_BRIDGE) if m.get("request", {}).get("subtype") == "can_use_tool")
    (asked,) = [json.loads(e.line) for e in bridge_lane(cell) if '"interaction/request"' in e.line]
    decided = perm.decide(
        request["request"], mode=MODES[options["permissionMode"]], escalation=options["permissionEscalation"], grants=[]
    )
    assert isinstance(decided, perm.Forward)
    assert json.dumps(decided.payload) == json.dumps(asked["params"]["payload"])
    msgspec.convert(asked["params"], interactions.InteractionRequestParams)
    resolution = next(m for m in runtime if m.get("id") == asked["id"])["result"]
    if decided.payload["kind"] == "user_question":
        body = perm.answer_questions(decided, resolution)
    else:
        body, _ = perm.answer_approval(decided, resolution)
    (answered,) = [
        m["response"]["response"]
        for m in _lines(cell, BRIDGE_TO_PROVIDER)
        if m.get("response", {}).get("request_id") == request["request_id"]
    ]
    assert json.dumps(body) == json.dumps(answered)


def can_use(tool: str, tool_input: Any, **fields: Any) -> dict[str, Any]:
    return {"subtype": "can_use_tool", "tool_name": tool, "input": tool_input, "tool_use_id": "toolu_1", **fields}


SUGGEST = [{"type": "addRules", "rules": [{"toolName": "Bash"}], "behavior": "allow", "destination": "session"}]


def test_calls_without_a_reason_to_ask_are_allowed() -> None:
    assert perm.decide(can_use("Bash", {"command": "ls"}), mode="acceptEdits", escalation="ask", grants=[]) == {
        "behavior": "allow",
        "updatedInput": {"command": "ls"},
        "toolUseID": "toolu_1",
    }
    full = perm.decide(
        can_use("Bash", {"command": "x"}, blocked_path="/etc"), mode="bypassPermissions", escalation=None, grants=[]
    )
    assert isinstance(full, dict) and full["behavior"] == "allow"


def test_escalation_deny_answers_with_the_policy_message() -> None:
    denied = perm.decide(
        can_use("Write", {"file_path": "/x"}, blocked_path="/x"), mode="acceptEdits", escalation="deny", grants=[]
    )
    assert denied == {"behavior": "deny", "message": perm.WORKSPACE_ONLY, "toolUseID": "toolu_1"}
    reason = perm.decide(can_use("Read", {}, decision_reason="outside"), mode="dontAsk", escalation=None, grants=[])
    assert isinstance(reason, dict) and reason["message"] == "outside"
    sandbox = perm.decide(
        can_use("Bash", {"command": "x", "dangerouslyDisableSandbox": True}), mode="auto", escalation="deny", grants=[]
    )
    assert isinstance(sandbox, dict) and sandbox["message"] == perm.WORKSPACE_ONLY


def test_requested_profiles_by_tool_kind() -> None:
    dirs = [{"type": "addDirectories", "directories": ["/a", "/a"], "destination": "session"}]
    assert perm.requested_profile("Read", "/b", perm.suggestions(dirs)) == {
        "network": None,
        "fileSystem": {"read": ["/a", "/b"], "write": []},
    }
    assert perm.requested_profile("Edit", None, dirs)["fileSystem"] == {"read": [], "write": ["/a"]}
    assert perm.requested_profile("WebFetch", None, []) == {"network": {"enabled": True}, "fileSystem": None}
    assert perm.suggestions([{"type": "addRules", "rules": [], "behavior": "allow", "destination": "session"}, 3]) == []


def test_file_change_and_grant_subjects_offer_session_grants_only_when_useful() -> None:
    edit = perm.decide(
        can_use("Edit", {"file_path": "/w/a"}, blocked_path="/w/a"), mode="acceptEdits", escalation="ask", grants=[]
    )
    assert isinstance(edit, perm.Forward)
    assert edit.payload["subject"] == {
        "kind": "file_change",
        "itemId": "toolu_1",
        "writeScope": None,
        "sessionGrant": {"network": None, "fileSystem": {"read": [], "write": ["/w/a"]}},
    }
    assert edit.payload["availableDecisions"] == ["allow_once", "allow_for_session", "deny"]
    other = perm.decide(can_use("Skill", {}, decision_reason="why", title="t"), mode="auto", escalation=None, grants=[])
    assert isinstance(other, perm.Forward)
    assert other.payload["subject"]["kind"] == "permission_grant" and other.payload["reason"] == "why"
    assert other.payload["availableDecisions"] == ["allow_once", "deny"]


def test_allow_for_session_caches_a_grant_that_covers_later_requests() -> None:
    request = can_use("Bash", {"command": "curl x"}, permission_suggestions=SUGGEST, blocked_path="/home/u/f")
    forward = perm.decide(request, mode="acceptEdits", escalation="ask", grants=[])
    assert isinstance(forward, perm.Forward)
    granted = {"network": {"enabled": True}, "fileSystem": {"read": ["/home/u"], "write": ["/home/u"]}}
    body, grant = perm.answer_approval(forward, {"decision": "allow_for_session", "grantedPermissions": granted})
    assert body == {
        "behavior": "allow",
        "updatedInput": {"command": "curl x"},
        "updatedPermissions": [
            {"type": "addDirectories", "directories": ["/home/u"], "destination": "session"},
            {"type": "addRules", "rules": [{"toolName": "Bash"}], "behavior": "allow", "destination": "session"},
        ],
        "decisionClassification": "user_permanent",
        "toolUseID": "toolu_1",
    }
    assert grant is not None
    again = perm.decide({**request, "blocked_path": "/home/u/f"}, mode="acceptEdits", escalation="ask", grants=[grant])
    assert isinstance(again, dict) and again["decisionClassification"] == "user_permanent"
    elsewhere = perm.decide({**request, "blocked_path": "/etc/x"}, mode="acceptEdits", escalation="ask", grants=[grant])
    assert isinstance(elsewhere, perm.Forward)
    with pytest.raises(perm.InvalidResponse):
        perm.answer_approval(forward, {"decision": "allow_for_session", "grantedPermissions": None})


def test_plan_approval_and_rejection() -> None:
    forward = perm.decide(can_use("ExitPlanMode", {"plan": "# Plan"}), mode="plan", escalation=None, grants=[])
    assert isinstance(forward, perm.Forward)
    assert forward.payload == {
        "kind": "approval",
        "subject": {"kind": "plan", "itemId": "toolu_1", "plan": "# Plan", "planFilePath": None},
        "reason": None,
        "availableDecisions": ["allow_once", "deny"],
    }
    body, _ = perm.answer_approval(forward, {"decision": "deny"})
    assert body["message"] == perm.PLAN_REJECTED
    assert perm.decide(can_use("ExitPlanMode", {"plan": ""}), mode="plan", escalation=None, grants=[]) == perm.deny(
        "toolu_1", perm.INVALID_PLAN
    )


def test_question_answers_with_free_text_and_annotations() -> None:
    question = {
        "question": "Which?",
        "header": "Pick",
        "options": [{"label": "a", "description": "A"}, {"label": "b", "description": "B", "preview": "p"}],
        "multiSelect": True,
    }
    forward = perm.decide(
        can_use("AskUserQuestion", {"questions": [question]}), mode="auto", escalation=None, grants=[]
    )
    assert isinstance(forward, perm.Forward)
    qid = "toolu_1:question-1"
    body = perm.answer_questions(
        forward,
        {
            "kind": "user_answer",
            "answers": {qid: {"selected": [f"{qid}:option-1", f"{qid}:option-2"], "freeText": "both"}},
        },
    )
    assert body["updatedInput"]["answers"] == {"Which?": "a, b; both"}
    assert body["updatedInput"]["annotations"] == {"Which?": {"notes": "both"}}
    with pytest.raises(perm.InvalidResponse):
        perm.answer_questions(forward, {"kind": "user_answer", "answers": {qid: {"selected": ["nope"]}}})
    with pytest.raises(perm.InvalidResponse):
        perm.answer_questions(forward, {"decision": "allow_once"})
    duplicate = {"questions": [question, question]}
    assert perm.decide(can_use("AskUserQuestion", duplicate), mode="auto", escalation=None, grants=[]) == perm.deny(
        "toolu_1", perm.INVALID_QUESTION
    )
