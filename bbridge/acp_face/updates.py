"""Pure: a thread's `ThreadEvent`s as ACP `session/update`s, and a turn's end as a prompt's stop reason.

One `Updates` per session holds what the mapping needs across events: which items streamed their text (a
completed message or reasoning that streamed nothing is sent whole), the output a tool call has streamed so far
(an ACP `tool_call_update`'s `content` replaces the call's content, so each update carries the whole text,
its tail past `OUTPUT_MAX`), and the plan text streamed. Events with no ACP counterpart map to nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

OUTPUT_MAX: Final = 64 * 1024  # characters of a tool call's streamed output an update carries (the tail)

# bb item type -> ACP tool kind; every other item with a presentation is `other`
TOOL_KINDS: Final = {
    "commandExecution": "execute",
    "backgroundTask": "execute",
    "fileChange": "edit",
    "fileRead": "read",
    "imageView": "read",
    "search": "search",
    "webSearch": "fetch",
    "webFetch": "fetch",
    "toolCall": "other",
    "mcpToolCall": "other",
    "delegation": "think",
    "extension": "other",
}
TOOL_TITLES: Final = {  # the title of an item whose presentation names no label
    "commandExecution": "Run",
    "backgroundTask": "Background task",
    "fileChange": "Edit",
    "fileRead": "Read",
    "imageView": "View image",
    "search": "Search",
    "webSearch": "Web search",
    "webFetch": "Fetch",
    "toolCall": "Tool",
    "mcpToolCall": "Tool",
    "delegation": "Delegate",
    "extension": "Extension",
}
OUTPUT_EVENTS: Final = ("item/commandExecution/outputDelta", "item/fileChange/outputDelta")
THOUGHT_EVENTS: Final = ("item/reasoning/textDelta", "item/reasoning/summaryTextDelta")
STOP_BY_CATEGORY: Final = {"max-output-tokens": "max_tokens", "max-turns": "max_turn_requests", "policy": "refusal"}


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def stop_reason(event: dict[str, Any]) -> str | None:
    """A `turn/completed`'s ACP stop reason; None for a failed turn with no ACP reason (the prompt's answer is then
    an error carrying the turn's message)."""
    status = event.get("status")
    if status == "completed":
        return "end_turn"
    if status == "interrupted":
        return "cancelled"
    category = (event.get("error") or {}).get("category")
    return STOP_BY_CATEGORY.get(category) if isinstance(category, str) else None


def failure_message(event: dict[str, Any]) -> str:
    """Why a turn failed, from its `turn/completed`."""
    error = event.get("error") or {}
    return str(error.get("message") or "the turn failed")


def user_message(inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A recorded turn input (`thread/inputs`) as `user_message_chunk` updates: its text, and a file or image it
    names as a resource link."""
    updates: list[dict[str, Any]] = []
    for part in inputs:
        kind = part.get("type")
        if kind == "text" and part.get("text"):
            content: dict[str, Any] = text_block(str(part["text"]))
        elif kind in ("localFile", "localImage") and part.get("path"):
            path = str(part["path"])
            content = {"type": "resource_link", "uri": f"file://{path}", "name": str(part.get("name") or path)}
        else:
            continue
        updates.append({"sessionUpdate": "user_message_chunk", "content": content})
    return updates


@dataclass
class Updates:
    """One session's mapping state."""

    streamed: set[str] = field(default_factory=set)  # items whose text came as deltas
    outputs: dict[str, str] = field(default_factory=dict)  # a tool call's streamed output so far
    plans: dict[str, str] = field(default_factory=dict)  # a plan item's streamed text

    def take(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The `session/update`s (each the `update` member) one event becomes."""
        kind = event.get("type")
        if kind == "item/agentMessage/delta":
            self.streamed.add(event["itemId"])
            return [{"sessionUpdate": "agent_message_chunk", "content": text_block(event["delta"])}]
        if kind in THOUGHT_EVENTS:
            self.streamed.add(event["itemId"])
            return [{"sessionUpdate": "agent_thought_chunk", "content": text_block(event["delta"])}]
        if kind == "item/plan/delta":
            item_id = event["itemId"]
            self.plans[item_id] = self.plans.get(item_id, "") + event["delta"]
            return [plan_update(plan_lines(self.plans[item_id]))]
        if kind in OUTPUT_EVENTS:
            item_id = event["itemId"]
            text = (self.outputs.get(item_id, "") + event["delta"])[-OUTPUT_MAX:]
            self.outputs[item_id] = text
            return [{"sessionUpdate": "tool_call_update", "toolCallId": item_id, "content": [text_content(text)]}]
        if kind == "item/toolCall/progress" and event.get("message"):
            message = str(event["message"])
            return [{"sessionUpdate": "tool_call_update", "toolCallId": event["itemId"], "status": "in_progress",
                     "content": [text_content(message)]}]  # fmt: skip
        if kind == "thread/contextWindowUsage/updated":
            usage = event.get("contextWindowUsage") or {}
            used, size = usage.get("usedTokens"), usage.get("modelContextWindow")
            if isinstance(used, int) and isinstance(size, int):
                return [{"sessionUpdate": "usage_update", "used": used, "size": size}]
            return []
        if kind == "item/started":
            return self._started(event["item"])
        if kind in ("item/completed", "item/backgroundTask/completed", "item/delegation/completed"):
            return self._completed(event["item"])
        return []

    def _started(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        kind = item.get("type")
        if kind == "planSteps":
            return [plan_update(steps_entries(item))]
        if not is_tool(item):
            return []
        call = {"sessionUpdate": "tool_call", "toolCallId": item["id"], "title": title(item), "kind": tool_kind(item),
                "status": "pending" if item.get("approvalStatus") == "pending" else "in_progress"}  # fmt: skip
        where = locations(item)
        if where:
            call["locations"] = where
        raw = raw_input(item)
        if raw is not None:
            call["rawInput"] = raw
        return [call]

    def _completed(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        kind, item_id = item.get("type"), item.get("id", "")
        if kind in ("agentMessage", "reasoning"):
            if item_id in self.streamed:
                self.streamed.discard(item_id)
                return []
            text = whole_text(item)
            chunk = "agent_message_chunk" if kind == "agentMessage" else "agent_thought_chunk"
            return [{"sessionUpdate": chunk, "content": text_block(text)}] if text else []
        if kind == "plan":
            self.plans.pop(item_id, None)
            return [plan_update(plan_lines(str(item.get("text") or "")))]
        if kind == "planSteps":
            return [plan_update(steps_entries(item))]
        if not is_tool(item):
            return []
        streamed = self.outputs.pop(item_id, "")
        update: dict[str, Any] = {"sessionUpdate": "tool_call_update", "toolCallId": item_id,
                                  "status": final_status(item), "title": title(item)}  # fmt: skip
        content = final_content(item, streamed)
        if content:
            update["content"] = content
        where = locations(item)
        if where:
            update["locations"] = where
        return [update]


def is_tool(item: dict[str, Any]) -> bool:
    """Whether the item shows as an ACP tool call: a known tool-like type, or any item a bridge presents."""
    return item.get("type") in TOOL_KINDS or isinstance(item.get("presentation"), dict)


def tool_kind(item: dict[str, Any]) -> str:
    return TOOL_KINDS.get(str(item.get("type")), "other")


def final_status(item: dict[str, Any]) -> str:
    return "completed" if item.get("status", "completed") == "completed" else "failed"


def label(item: dict[str, Any]) -> str | None:
    """The presentation's label for the item's state (`{pending, completed}` or one string)."""
    shown = (item.get("presentation") or {}).get("label")
    if isinstance(shown, str):
        return shown
    if isinstance(shown, dict):
        state = "completed" if item.get("status") in ("completed", "failed", "interrupted") else "pending"
        chosen = shown.get(state) or shown.get("pending")
        return chosen if isinstance(chosen, str) else None
    return None


def subject(item: dict[str, Any]) -> str:
    """What the item acts on, in a few words: the command, the tool, the path, the query or URL."""
    kind = item.get("type")
    if kind == "commandExecution":
        return str(item.get("command") or "")
    if kind in ("toolCall", "mcpToolCall"):
        return str(item.get("tool") or "")
    if kind == "fileChange":
        return ", ".join(str(change.get("path")) for change in item.get("changes") or [])
    if kind in ("fileRead", "imageView"):
        return str(item.get("path") or "")
    if kind == "search":
        return str(item.get("query") or "")
    if kind == "webSearch":
        return ", ".join(map(str, item.get("queries") or []))
    if kind == "webFetch":
        return str(item.get("url") or "")
    if kind in ("backgroundTask",):
        return str(item.get("description") or "")
    if kind == "delegation":
        return str(item.get("label") or "")
    if kind == "extension":
        return str(item.get("kind") or "")
    return ""


def title(item: dict[str, Any]) -> str:
    head = label(item) or TOOL_TITLES.get(str(item.get("type")), "Tool")
    what = subject(item)
    return f"{head}: {what}" if what else head


def locations(item: dict[str, Any]) -> list[dict[str, Any]]:
    kind = item.get("type")
    if kind == "fileChange":
        return [{"path": str(change["path"])} for change in item.get("changes") or [] if change.get("path")]
    if kind in ("fileRead", "imageView") and item.get("path"):
        return [{"path": str(item["path"])}]
    return []


def raw_input(item: dict[str, Any]) -> Any:
    kind = item.get("type")
    if kind in ("toolCall", "mcpToolCall"):
        return item.get("arguments")
    if kind == "commandExecution":
        return {"command": item.get("command"), "cwd": item.get("cwd")}
    return None


def text_content(text: str) -> dict[str, Any]:
    return {"type": "content", "content": text_block(text)}


def final_content(item: dict[str, Any], streamed: str) -> list[dict[str, Any]]:
    """A completed tool call's content: a file change's diffs, else its output (the aggregated output, a tool's
    result or result text, or what streamed)."""
    if item.get("type") == "fileChange":
        return [diff_content(change) for change in item.get("changes") or [] if change.get("path")]
    output = item.get("aggregatedOutput") or item.get("resultText") or streamed
    result = item.get("result")
    if not output and isinstance(result, str):
        output = result
    return [text_content(str(output)[-OUTPUT_MAX:])] if output else []


def diff_content(change: dict[str, Any]) -> dict[str, Any]:
    """A file change as ACP `diff` content, read back from its unified diff: the removed and context lines are the
    old text, the added and context lines the new (the hunks only, not the whole file); an added file has no old
    text."""
    old: list[str] = []
    new: list[str] = []
    for line in str(change.get("diff") or "").splitlines(keepends=True):
        if line.startswith(("---", "+++", "@@", "\\")):
            continue
        if line.startswith("+"):
            new.append(line[1:])
        elif line.startswith("-"):
            old.append(line[1:])
        else:
            body = line[1:] if line.startswith(" ") else line
            old.append(body)
            new.append(body)
    content: dict[str, Any] = {"type": "diff", "path": str(change["path"]), "newText": "".join(new)}
    content["oldText"] = None if change.get("kind") == "add" else "".join(old)
    return content


def whole_text(item: dict[str, Any]) -> str:
    if item.get("type") == "reasoning":
        return "\n".join(map(str, [*(item.get("summary") or []), *(item.get("content") or [])]))
    return str(item.get("text") or "")


def plan_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def plan_update(entries: list[dict[str, Any]] | list[str]) -> dict[str, Any]:
    """A `plan` update: a plan's lines become pending entries of medium priority (its text says no progress)."""
    built = [
        {"content": entry, "priority": "medium", "status": "pending"} if isinstance(entry, str) else entry
        for entry in entries
    ]
    return {"sessionUpdate": "plan", "entries": built}


PLAN_STATUS: Final = {"completed": "completed", "in_progress": "in_progress", "inProgress": "in_progress"}


def steps_entries(item: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "content": str(step.get("step", "")),
            "priority": "medium",
            "status": PLAN_STATUS.get(str(step.get("status")), "pending"),
        }
        for step in item.get("steps") or []
    ]
