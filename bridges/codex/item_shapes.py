"""Codex thread items as grammar item shapes (spec §3.4) with their presentations (§3.5).

`classify` answers one of three things: a shape to open/close, `None` (an item the reference ignores,
such as codex echoing bb's own prompt) or `ShapeError` (the item becomes a vouched `unhandled`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bbridge.core import grammar as g
from bbridge.core import js

from . import presentation as p
from .fields import ShapeError, need, nullable_number, obj, optional_text, strings, text

STATUS = {"inProgress": "pending", "completed": "completed", "failed": "failed", "declined": "interrupted"}
COLLAB_VERBS = {
    "spawnAgent": "Spawn agent",
    "wait": "Wait for agent",
    "resumeAgent": "Resume agent",
    "sendInput": "Send input to agent",
    "closeAgent": "Close agent",
}
_USER_CONTENT = {
    "text": ("text",),
    "image": ("url",),
    "localImage": ("path",),
    "skill": ("name", "path"),
    "mention": ("name", "path"),
}
DYNAMIC_FAILURE = "Dynamic tool call failed"


@dataclass(slots=True)
class Classified:
    item: g.Shape
    presentation: g.Presentation
    status: str
    declined: bool = False


def _status(item: dict[str, Any]) -> str:
    status = item.get("status")
    need(isinstance(status, str) and status in STATUS)
    return str(status)


def _tool_like(shape: g.Shape, shown: g.Presentation, status: str) -> Classified:
    return Classified(shape, shown, STATUS[status], status == "declined")


def _command(item: dict[str, Any]) -> Classified:
    command, cwd = text(item, "command"), text(item, "cwd")
    need("aggregatedOutput" in item)
    output = optional_text(item, "aggregatedOutput")
    status = _status(item)
    exit_code, duration = nullable_number(item, "exitCode"), nullable_number(item, "durationMs")
    shape = g.CommandShape(command=command, cwd=cwd)
    if output is not None:
        shape.aggregatedOutput = output
    if exit_code is not None:
        shape.exitCode = exit_code
    if duration is not None:
        shape.durationMs = duration
    return _tool_like(shape, p.command(command), status)


def _file_change(item: dict[str, Any]) -> Classified:
    changes = item.get("changes")
    need(isinstance(changes, list))
    status = _status(item)
    entries: list[g.FileChangeEntry] = []
    for raw in changes or []:
        change = obj(raw)
        path, diff, kind = text(change, "path"), text(change, "diff"), obj(change.get("kind"))
        kind_type = kind.get("type")
        need(kind_type in ("add", "delete", "update"))
        move = optional_text(kind, "move_path")
        entry = g.FileChangeEntry(path=path, kind=kind_type)  # type: ignore[arg-type]
        if kind_type == "update" and move:
            entry.movePath = move
        if diff:
            entry.diff = diff
        entries.append(entry)
    return _tool_like(g.FileChangeShape(changes=entries), p.file_change([e.path for e in entries]), status)


def _mcp(item: dict[str, Any]) -> Classified:
    server, tool, error = text(item, "server"), text(item, "tool"), item.get("error")
    message = optional_text(obj(error), "message") if error is not None else None
    status = _status(item)
    duration = nullable_number(item, "durationMs")
    shape = g.ToolShape(server=server, tool=tool)
    if "arguments" in item:
        shape.args = item["arguments"]
    if message is not None:
        shape.error = message
    if duration is not None:
        shape.durationMs = duration
    return _tool_like(shape, p.mcp_tool(server, tool, item.get("arguments")), status)


def dynamic_result(content: list[dict[str, Any]] | None) -> str | None:
    """The tool's content items as one text: images as `[image: url]`, blank parts dropped."""
    parts: list[str] = []
    for entry in content or []:
        part = entry["text"] if entry["type"] == "inputText" else f"[image: {entry['imageUrl']}]"
        if js.trim(part):
            parts.append(part)
    return "\n".join(parts) if parts else None


def _content(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    need(isinstance(value, list))
    entries = [obj(entry) for entry in value]
    for entry in entries:
        kind = entry.get("type")
        need(kind in ("inputText", "inputImage"))
        text(entry, "text" if kind == "inputText" else "imageUrl")
    return entries


def _dynamic(item: dict[str, Any], bb_tools: Mapping[str, g.Presentation | None]) -> Classified:
    tool, success = text(item, "tool"), item.get("success")
    need("arguments" in item and (success is None or isinstance(success, bool)))
    content = _content(item.get("contentItems"))
    status = _status(item)
    duration = nullable_number(item, "durationMs")
    shape = g.ToolShape(tool=tool)
    injected = tool in bb_tools
    if injected:
        shape.server = "bb"
    shape.args = item["arguments"]
    result = dynamic_result(content)
    if result is not None:
        shape.result = result
    if success is False:
        shape.error = result if result is not None else DYNAMIC_FAILURE
    if duration is not None:
        shape.durationMs = duration
    defined = bb_tools.get(tool) if injected else None
    shown = defined if defined is not None else p.make(f"Running {tool}", f"Ran {tool}", "Toolbox")
    return _tool_like(shape, shown, status)


def _collab(item: dict[str, Any]) -> Classified:
    tool, sender, receivers = text(item, "tool"), text(item, "senderThreadId"), strings(item.get("receiverThreadIds"))
    states = obj(item.get("agentsStates"))
    for name in ("prompt", "model", "reasoningEffort"):
        need(name in item)
        optional_text(item, name)
    status = _status(item)
    prompt: str | None = item["prompt"]
    shown = p.collab(tool, prompt)
    if receivers and receivers[0]:
        trimmed = js.trim(prompt) if prompt is not None else ""
        label = trimmed or COLLAB_VERBS.get(tool, tool)
        delegation = g.DelegationShape(childRef=receivers[0], label=label, background=False)
        if status != "inProgress" and states:
            delegation.summary = "\n".join(
                f"{agent}: {state if isinstance(state, str) else js.stringify(state)}"
                for agent, state in states.items()
            )
        return _tool_like(delegation, shown, status)
    args: dict[str, Any] = {"senderThreadId": sender, "receiverThreadIds": receivers}
    for name in ("prompt", "model", "reasoningEffort"):
        if item[name]:
            args[name] = item[name]
    return _tool_like(g.ToolShape(tool=tool, args=args, result=states), shown, status)


def _queries(item: dict[str, Any], action: dict[str, Any]) -> list[str]:
    found: list[Any] = list(action.get("queries") or [])
    found += [action.get("query"), item.get("query")]
    return list(dict.fromkeys(query for query in found if isinstance(query, str) and query))


def _web(item: dict[str, Any]) -> Classified | None:
    text(item, "query")
    need("action" in item)
    if item["action"] is None:
        return None
    action = obj(item["action"])
    kind = action.get("type")
    if kind == "other":
        return None
    if kind == "search":
        optional_text(action, "query")
        if action.get("queries") is not None:
            strings(action["queries"])
        queries = _queries(item, action)
        need(bool(queries))
        shown = p.make("Searching the web", "Searched the web", "Globe", p.title(queries[0]))
        return Classified(g.WebSearchShape(queries=queries), shown, "completed")
    need(kind in ("openPage", "findInPage"))
    url, pattern = optional_text(action, "url"), optional_text(action, "pattern")
    if not url:
        raise ShapeError
    shown = p.make("Fetching page", "Fetched page", "Browser", p.title(url))
    return Classified(g.WebFetchShape(url=url, pattern=pattern if kind == "findInPage" else None), shown, "completed")


def _user_message(item: dict[str, Any]) -> None:
    content = item.get("content")
    need(isinstance(content, list))
    for raw in content or []:
        entry = obj(raw)
        kind = entry.get("type")
        need(kind in _USER_CONTENT)
        for name in _USER_CONTENT[str(kind)]:
            text(entry, name)


def classify(item: dict[str, Any], bb_tools: Mapping[str, g.Presentation | None]) -> Classified | None:
    """The shape and presentation of one codex item (`None`: nothing is emitted for it)."""
    kind = item.get("type")
    if kind == "agentMessage":
        return Classified(g.AgentMessageShape(text=text(item, "text")), p.AGENT_MESSAGE, "completed")
    if kind == "userMessage":
        _user_message(item)
        return None
    if kind == "reasoning":
        shape = g.ReasoningShape(summary=strings(item.get("summary")), content=strings(item.get("content")))
        return Classified(shape, p.REASONING, "completed")
    if kind == "commandExecution":
        return _command(item)
    if kind == "fileChange":
        return _file_change(item)
    if kind == "mcpToolCall":
        return _mcp(item)
    if kind == "dynamicToolCall":
        return _dynamic(item, bb_tools)
    if kind == "collabAgentToolCall":
        return _collab(item)
    if kind == "webSearch":
        return _web(item)
    if kind == "imageView":
        path = text(item, "path")
        shown = p.make("Viewing image", "Viewed image", "Eye", p.title(p.file_name(path)))
        return Classified(g.ImageViewShape(path=path), shown, "completed")
    if kind == "plan":
        return Classified(g.PlanShape(text=text(item, "text")), p.PLAN, "completed")
    if kind == "contextCompaction":
        return Classified(g.CompactionShape(), p.COMPACTION, "completed")
    raise ShapeError
