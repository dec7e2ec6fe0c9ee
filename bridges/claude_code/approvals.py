"""The `can_use_tool` policy and the interaction codec (spec §5.1–§5.5).

`approvalEnforcedBy: "provider"`: the bridge answers what its policy can decide and forwards to the runtime
only what needs a user. Everything here is pure JSON in, JSON out, in the member orders the CLI and the
runtime receive; the session does the I/O (the `interaction/request`, the control response).
"""

from __future__ import annotations

import os.path
from dataclasses import dataclass
from typing import Any, Literal

from bbridge.core import js

Json = Any
Escalation = Literal["ask", "deny"] | None
DESTINATIONS = frozenset({"userSettings", "projectSettings", "localSettings", "session", "cliArg"})
READ_TOOLS = frozenset({"Read", "Grep", "Glob", "LS"})
WRITE_TOOLS = frozenset({"Edit", "Write", "NotebookEdit"})
NETWORK_TOOLS = frozenset({"WebFetch", "WebSearch", "SandboxNetworkAccess"})

SESSION_NOT_FOUND = "Thread session not found"
INVALID_QUESTION = "Invalid AskUserQuestion input"
INVALID_PLAN = "Invalid ExitPlanMode input"
CANCELLED = "Interactive request cancelled"
QUESTION_CANCELLED = "User question request cancelled"
REQUEST_FAILED = "Interactive request failed"
INVALID_RESPONSE = "Invalid interactive response payload"
DENIED = "Permission request denied"
PLAN_REJECTED = (
    "The user rejected this plan. Do not call ExitPlanMode again with the same plan. Use AskUserQuestion to find "
    "out what they want changed, revise the plan, and only then propose it again."
)
WORKSPACE_ONLY = (
    "bb's workspace sandbox allows work inside the current workspace only. Stay inside the workspace or explain "
    "why extra access is needed."
)
READ_ONLY = (
    "bb readonly mode allows reading and analysis only. Continue with a read-only answer; do not modify files, run "
    "mutating shell commands, use network, or use mutating tools."
)


class InvalidResponse(ValueError):
    """A runtime resolution that cannot be turned into an answer for the CLI."""


@dataclass(frozen=True, slots=True)
class Grant:
    """A session permission grant: the requested profile an `allow_for_session` answer covered (§5.5)."""

    tool: str
    permissions: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Forward:
    """A decision only the user can make: the `interaction/request` payload and what answering it needs."""

    payload: dict[str, Any]
    tool: str
    tool_input: Json
    tool_use_id: str
    requested: dict[str, Any] | None  # R, for approvals other than plans


def deny(tool_use_id: str, message: str, *, interrupt: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"behavior": "deny"}
    if interrupt:
        body["interrupt"] = True
    return {**body, "message": message, "toolUseID": tool_use_id}


def allow(tool_use_id: str, tool_input: Json) -> dict[str, Any]:
    return {"behavior": "allow", "updatedInput": tool_input, "toolUseID": tool_use_id}


# -- the requested profile and grants (§5.4, §5.5) ----------------------------------------


def suggestions(raw: Json) -> list[dict[str, Any]]:
    """The valid `permission_suggestions` entries (invalid ones are dropped)."""
    if not isinstance(raw, list):
        return []
    return [s for s in raw if _valid_suggestion(s)]


def _valid_suggestion(s: Json) -> bool:
    if not isinstance(s, dict) or s.get("destination") not in DESTINATIONS:
        return False
    if s.get("type") == "addRules":
        rules = s.get("rules")
        return (
            s.get("behavior") == "allow"
            and isinstance(rules, list)
            and len(rules) > 0
            and all(_valid_rule(r) for r in rules)
        )
    if s.get("type") == "addDirectories":
        dirs = s.get("directories")
        return isinstance(dirs, list) and len(dirs) > 0 and all(isinstance(d, str) for d in dirs)
    return False


def _valid_rule(rule: Json) -> bool:
    return (
        isinstance(rule, dict)
        and isinstance(rule.get("toolName"), str)
        and isinstance(rule.get("ruleContent", ""), str)
    )


def requested_profile(tool: str, blocked_path: Json, valid: list[dict[str, Any]]) -> dict[str, Any]:
    """R: the directories and network access the call asks for."""
    dirs: list[str] = []
    for s in valid:
        if s["type"] == "addDirectories":
            dirs.extend(s["directories"])
    if isinstance(blocked_path, str):
        dirs.append(blocked_path)
    dirs = list(dict.fromkeys(dirs))
    file_system: dict[str, Any] | None = None
    if dirs and tool in READ_TOOLS:
        file_system = {"read": dirs, "write": []}
    elif dirs and tool in WRITE_TOOLS:
        file_system = {"read": [], "write": dirs}
    elif dirs:
        file_system = {"read": dirs, "write": list(dirs)}
    network = tool in NETWORK_TOOLS or any(s["type"] == "addRules" for s in valid)
    return {"network": {"enabled": True} if network else None, "fileSystem": file_system}


def _under(path: str, roots: list[str]) -> bool:
    resolved = os.path.normpath(os.path.abspath(path))
    for root in roots:
        base = os.path.normpath(os.path.abspath(root))
        if resolved == base or resolved.startswith(base.rstrip("/") + "/"):
            return True
    return False


def covers(grant: Grant, tool: str, requested: dict[str, Any]) -> bool:
    """A cached grant covers a new request for the same tool asking for no more than it allowed."""
    if grant.tool != tool:
        return False
    wants_network = (requested.get("network") or {}).get("enabled") is True
    if wants_network and (grant.permissions.get("network") or {}).get("enabled") is not True:
        return False
    wanted, granted = requested.get("fileSystem"), grant.permissions.get("fileSystem")
    if wanted is None:
        return True
    if granted is None:
        return False
    readable = [*granted["read"], *granted["write"]]
    return all(_under(p, readable) for p in wanted["read"]) and all(
        _under(p, granted["write"]) for p in wanted["write"]
    )


def session_updates(granted: Json, tool: str | None) -> list[dict[str, Any]]:
    """The CLI's `updatedPermissions` for an `allow_for_session` answer (§5.3)."""
    updates: list[dict[str, Any]] = []
    file_system = granted.get("fileSystem") if isinstance(granted, dict) else None
    if isinstance(file_system, dict):
        dirs = list(dict.fromkeys([*file_system.get("read", []), *file_system.get("write", [])]))
        if dirs:
            updates.append({"type": "addDirectories", "directories": dirs, "destination": "session"})
    network = granted.get("network") if isinstance(granted, dict) else None
    if tool is not None and isinstance(network, dict) and network.get("enabled") is True:
        updates.append(
            {"type": "addRules", "rules": [{"toolName": tool}], "behavior": "allow", "destination": "session"}
        )
    return updates


# -- the decision procedure (§5.1) -------------------------------------------------


def decide(
    request: dict[str, Any], *, mode: str, escalation: Escalation, grants: list[Grant]
) -> dict[str, Any] | Forward:
    """A `can_use_tool` request → the CLI answer the policy gives, or what to ask the user."""
    tool: Json = request.get("tool_name")
    tool_input: Json = request.get("input")
    tool_use_id: str = request.get("tool_use_id", "")
    tool = tool if isinstance(tool, str) else ""
    if tool == "AskUserQuestion":
        if not valid_questions(tool_input):
            return deny(tool_use_id, INVALID_QUESTION)
        return Forward(question_payload(tool_use_id, tool_input), tool, tool_input, tool_use_id, None)
    if tool == "ExitPlanMode":
        if not _valid_plan(tool_input):
            return deny(tool_use_id, INVALID_PLAN)
        subject = {
            "kind": "plan",
            "itemId": tool_use_id,
            "plan": tool_input["plan"],
            "planFilePath": tool_input.get("planFilePath"),
        }
        payload = {"kind": "approval", "subject": subject, "reason": None, "availableDecisions": ["allow_once", "deny"]}
        return Forward(payload, tool, tool_input, tool_use_id, None)
    valid = suggestions(request.get("permission_suggestions"))
    requested = requested_profile(tool, request.get("blocked_path"), valid)
    sandbox_escape = isinstance(tool_input, dict) and tool_input.get("dangerouslyDisableSandbox") is True
    if tool == "Bash" and escalation == "deny" and sandbox_escape:
        return deny(tool_use_id, WORKSPACE_ONLY)
    if any(covers(grant, tool, requested) for grant in grants):
        return {**allow(tool_use_id, tool_input), "decisionClassification": "user_permanent"}
    raw = request.get("permission_suggestions")
    needs_user = "blocked_path" in request or "decision_reason" in request or (isinstance(raw, list) and len(raw) > 0)
    if not needs_user or mode == "bypassPermissions":
        return allow(tool_use_id, tool_input)
    if escalation == "deny" or mode == "dontAsk":
        reason = request.get("decision_reason")
        if reason is None:
            reason = WORKSPACE_ONLY if mode in ("acceptEdits", "auto") else READ_ONLY
        return deny(tool_use_id, str(reason))
    reason = next((request[k] for k in ("decision_reason", "title", "description") if k in request), None)
    decisions = (
        ["allow_once", "allow_for_session", "deny"] if session_updates(requested, tool) else ["allow_once", "deny"]
    )
    payload = {
        "kind": "approval",
        "subject": approval_subject(tool, tool_input, tool_use_id, requested),
        "reason": reason,
        "availableDecisions": decisions,
    }
    return Forward(payload, tool, tool_input, tool_use_id, requested)


def _valid_plan(tool_input: Json) -> bool:
    if not isinstance(tool_input, dict) or not isinstance(tool_input.get("plan"), str) or not tool_input["plan"]:
        return False
    path = tool_input.get("planFilePath")
    return "planFilePath" not in tool_input or (isinstance(path, str) and path != "")


def approval_subject(tool: str, tool_input: Json, tool_use_id: str, requested: dict[str, Any]) -> dict[str, Any]:
    i = tool_input if isinstance(tool_input, dict) else {}
    command = i.get("command")
    if tool == "Bash" and isinstance(command, str) and command and isinstance(i.get("cwd", ""), str):
        return {
            "kind": "command",
            "itemId": tool_use_id,
            "command": command,
            "cwd": i.get("cwd"),
            "actions": [{"type": "unknown", "command": command}],
            "sessionGrant": requested,
        }
    names = ("file_path", "path", "old_string", "new_string", "content")
    strings = isinstance(tool_input, dict) and all(isinstance(i[n], str) for n in names if n in i)
    path = i["file_path"] if "file_path" in i else i.get("path")
    if tool in WRITE_TOOLS and strings and isinstance(path, str) and path:
        return {"kind": "file_change", "itemId": tool_use_id, "writeScope": None, "sessionGrant": requested}
    return {"kind": "permission_grant", "itemId": tool_use_id, "toolName": tool, "permissions": requested}


# -- answers (§5.3) ---------------------------------------------------------------


def answer_approval(forward: Forward, resolution: Json) -> tuple[dict[str, Any], Grant | None]:
    """The runtime's approval resolution → the CLI answer, and the grant to cache when it was for the session."""
    t, i = forward.tool_use_id, forward.tool_input
    if not isinstance(resolution, dict) or "kind" in resolution:
        raise InvalidResponse(INVALID_RESPONSE)
    decision = resolution.get("decision")
    if decision == "deny":
        message = PLAN_REJECTED if forward.payload["subject"]["kind"] == "plan" else DENIED
        return {"behavior": "deny", "message": message, "decisionClassification": "user_reject", "toolUseID": t}, None
    if decision == "allow_once":
        return {
            "behavior": "allow",
            "updatedInput": i,
            "decisionClassification": "user_temporary",
            "toolUseID": t,
        }, None
    if decision != "allow_for_session" or not isinstance(resolution.get("grantedPermissions"), dict):
        raise InvalidResponse(INVALID_RESPONSE)
    subject = forward.payload["subject"]
    tool = "Bash" if subject["kind"] == "command" else subject.get("toolName")
    body: dict[str, Any] = {"behavior": "allow", "updatedInput": i}
    updates = session_updates(resolution["grantedPermissions"], tool if subject["kind"] != "file_change" else None)
    if updates:
        body["updatedPermissions"] = updates
    body.update(decisionClassification="user_permanent", toolUseID=t)
    grant = Grant(forward.tool, forward.requested) if forward.requested is not None else None
    return body, grant


# -- user questions (§5.2) -----------------------------------------------------------


def valid_questions(tool_input: Json) -> bool:
    questions = tool_input.get("questions") if isinstance(tool_input, dict) else None
    if not isinstance(questions, list) or not 1 <= len(questions) <= 4:
        return False
    for q in questions:
        if not isinstance(q, dict) or not _non_empty(q.get("question")) or not _non_empty(q.get("header")):
            return False
        options = q.get("options")
        if not isinstance(options, list) or not 2 <= len(options) <= 4 or not isinstance(q.get("multiSelect"), bool):
            return False
        for o in options:
            if not isinstance(o, dict) or not _non_empty(o.get("label")) or not _non_empty(o.get("description")):
                return False
            if "preview" in o and not isinstance(o["preview"], str):
                return False
    return len({q["question"] for q in questions}) == len(questions)


def _non_empty(value: Json) -> bool:
    return isinstance(value, str) and value != ""


def question_payload(tool_use_id: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    questions = []
    for k, q in enumerate(tool_input["questions"], 1):
        qid = f"{tool_use_id}:question-{k}"
        options = [
            {"value": f"{qid}:option-{j}", "label": o["label"], "description": o["description"]}
            for j, o in enumerate(q["options"], 1)
        ]
        questions.append(
            {
                "id": qid,
                "prompt": q["question"],
                "shortLabel": q["header"],
                "multiSelect": q["multiSelect"],
                "options": options,
                "allowFreeText": True,
            }
        )
    return {"kind": "user_question", "questions": questions}


def answer_questions(forward: Forward, resolution: Json) -> dict[str, Any]:
    """A `user_answer` resolution → the `AskUserQuestion` input the CLI completes the tool with."""
    if not isinstance(resolution, dict) or resolution.get("kind") != "user_answer":
        raise InvalidResponse(INVALID_RESPONSE)
    answers_in = resolution.get("answers")
    if not isinstance(answers_in, dict):
        raise InvalidResponse(INVALID_RESPONSE)
    questions: list[dict[str, Any]] = []
    answers: dict[str, str] = {}
    annotations: dict[str, dict[str, str]] = {}
    for q in forward.payload["questions"]:
        prompt = q["prompt"]
        if not q.get("options") or prompt in answers:
            raise InvalidResponse(INVALID_RESPONSE)
        labels = {o["value"]: o["label"] for o in q["options"]}
        questions.append(
            {
                "question": prompt,
                "header": q.get("shortLabel") or js.cut(prompt, 12),
                "options": [
                    {"label": o["label"], "description": o.get("description") or o["label"]} for o in q["options"]
                ],
                "multiSelect": q["multiSelect"],
            }
        )
        given = answers_in.get(q["id"])
        if not isinstance(given, dict):
            raise InvalidResponse(INVALID_RESPONSE)
        selected, free = given.get("selected", []), given.get("freeText")
        if not isinstance(selected, list) or any(v not in labels for v in selected):
            raise InvalidResponse(INVALID_RESPONSE)
        chosen = ", ".join(labels[v] for v in selected)
        free_text = free if isinstance(free, str) and free else None
        if chosen and free_text:
            answers[prompt] = f"{chosen}; {free_text}"
            annotations[prompt] = {"notes": free_text}
        elif chosen or free_text:
            answers[prompt] = chosen or str(free_text)
        else:
            raise InvalidResponse(INVALID_RESPONSE)
    updated: dict[str, Any] = {"questions": questions, "answers": answers}
    if annotations:
        updated["annotations"] = annotations
    return {"behavior": "allow", "updatedInput": updated, "toolUseID": forward.tool_use_id}
