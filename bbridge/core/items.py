"""Canonical item objects built from wire shapes (assembler.md §3.3–§3.6).

Items are plain insertion-ordered dicts whose key order is the reference's.
Values the wire hands over verbatim (presentation, workflow, usage, plan steps)
stay msgspec Structs; the event encoder writes them in schema order.
"""

from __future__ import annotations

from typing import Any, Final, cast

import msgspec

from bbridge.core import grammar as g
from bbridge.core import js
from bbridge.core.scalars import Wire

Item = dict[str, Any]

# Module constants of the compiled core are `Final`: mypyc keeps them in C statics (or inlines them), where a
# module name is a dict lookup at each use (an imported one too). `UNSET` is msgspec's, held here for that.
UNSET: Final = msgspec.UNSET
# The shapes the builders test a type against (`type(shape) is g.X` would read `g`, then its `X`).
AGENT_MESSAGE_SHAPE: Final = g.AgentMessageShape
BACKGROUND_TASK_SHAPE: Final = g.BackgroundTaskShape
COMMAND_SHAPE: Final = g.CommandShape
COMPACTION_SHAPE: Final = g.CompactionShape
DELEGATION_SHAPE: Final = g.DelegationShape
EXTENSION_SHAPE: Final = g.ExtensionShape
FILE_CHANGE_SHAPE: Final = g.FileChangeShape
FILE_READ_SHAPE: Final = g.FileReadShape
IMAGE_VIEW_SHAPE: Final = g.ImageViewShape
PLAN_SHAPE: Final = g.PlanShape
PLAN_STEPS_SHAPE: Final = g.PlanStepsShape
REASONING_SHAPE: Final = g.ReasoningShape
SEARCH_SHAPE: Final = g.SearchShape
TOOL_SHAPE: Final = g.ToolShape
WEB_FETCH_SHAPE: Final = g.WebFetchShape
WEB_SEARCH_SHAPE: Final = g.WebSearchShape

# -- the line diff built from oldText/newText --------------------------------

_LCS_CELL_LIMIT: Final = 1_000_000


def _lines(text: str) -> list[str]:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text:
        return []
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()
    return parts


def _line_diff(a: list[str], b: list[str]) -> list[str]:
    """Removes and adds (already prefixed) turning `a` into `b`; ties prefer removal."""
    if not a:
        return ["+" + line for line in b]
    if not b:
        return ["-" + line for line in a]
    if (len(a) + 1) * (len(b) + 1) > _LCS_CELL_LIMIT:
        return ["-" + line for line in a] + ["+" + line for line in b]
    n, m = len(a), len(b)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below = table[i], table[i + 1]
        ai = a[i]
        for j in range(m - 1, -1, -1):
            row[j] = below[j + 1] + 1 if ai == b[j] else max(below[j], row[j + 1])
    out: list[str] = []
    i = j = 0
    while i < n and j < m:
        if a[i] == b[j]:
            i += 1
            j += 1
        elif table[i + 1][j] >= table[i][j + 1]:
            out.append("-" + a[i])
            i += 1
        else:
            out.append("+" + b[j])
            j += 1
    out.extend("-" + line for line in a[i:])
    out.extend("+" + line for line in b[j:])
    return out


def edit_diff(path: str, old: str | None, new: str) -> str | None:
    """Hunk-less unified-like diff of one file; `None` when the texts are line-identical."""
    norm = path.replace("\\", "/").lstrip("/")
    if old is None:
        body = ["+" + line for line in _lines(new)]
        head = ["--- /dev/null", "+++ b/" + norm]
    else:
        ol, nl = _lines(old), _lines(new)
        start = 0
        limit = min(len(ol), len(nl))
        while start < limit and ol[start] == nl[start]:
            start += 1
        eo, en = len(ol), len(nl)
        while eo > start and en > start and ol[eo - 1] == nl[en - 1]:
            eo -= 1
            en -= 1
        body = _line_diff(ol[start:eo], nl[start:en])
        if not body:
            return None
        head = ["--- a/" + norm, "+++ b/" + norm]
    return "\n".join(head + body) + "\n"


def file_changes(changes: list[g.FileChangeEntry]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for entry in changes:
        change = {"path": entry.path, "kind": entry.kind}
        if entry.movePath is not UNSET:
            change["movePath"] = entry.movePath
        if entry.diff is not UNSET:
            diff: str | None = entry.diff
        elif entry.newText is not UNSET:
            diff = edit_diff(entry.path, None if entry.oldText is UNSET else entry.oldText, entry.newText)
        else:
            diff = None
        if diff:
            change["diff"] = diff
        out.append(change)
    return out


# -- helpers -----------------------------------------------------------------


def _finish(item: Item, parent: str | None, presentation: Any) -> Item:
    if parent:
        item["parentToolCallId"] = parent
    if presentation is not UNSET and presentation is not None:
        item["presentation"] = presentation
    return item


def _copy_present(item: Item, source: Wire, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(source, name)
        if value is not UNSET:
            item[name] = value


def _tool_core(item: Item, shape: g.ToolShape, status: str) -> None:
    if shape.server is not UNSET:
        item["server"] = shape.server
    item["tool"] = shape.tool
    if type(shape.args) is dict:
        item["arguments"] = shape.args
    item["status"] = status


def task_item(bb_id: str, shape: g.BackgroundTaskShape, parent: str | None) -> Item:
    """B-task: a background task snapshot; the shape's own status always wins."""
    item: Item = {
        "type": "backgroundTask", "id": bb_id, "familyId": shape.familyId,
        "taskType": shape.taskType, "description": shape.description, "status": shape.status,
        "taskStatus": shape.taskStatus, "skipTranscript": shape.skipTranscript,
    }  # fmt: skip
    _copy_present(item, shape, ("workflowName", "workflow", "usage", "summary", "error", "outputFile"))
    return _finish(item, parent, UNSET)


def delegation_item(
    bb_id: str, shape: g.DelegationShape, status: str, summary: Any, parent: str | None, pres: Any
) -> Item:
    item: Item = {
        "type": "delegation", "id": bb_id, "childRef": shape.childRef, "label": shape.label,
        "status": status, "background": shape.background,
    }  # fmt: skip
    if summary is not UNSET:
        item["summary"] = summary
    return _finish(item, parent, pres)


def _status_shape(bb_id: str, shape: g.Shape, status: str) -> Item | None:
    """Items of the v3 kinds that carry a status and are built the same at open and close."""
    t = type(shape)
    if t is FILE_READ_SHAPE:
        item: Item = {"type": "fileRead", "id": bb_id, "path": shape.path}  # type: ignore[attr-defined]
        _copy_present(item, shape, ("cmd",))
    elif t is SEARCH_SHAPE:
        item = {"type": "search", "id": bb_id, "mode": shape.mode, "query": shape.query}  # type: ignore[attr-defined]
        _copy_present(item, shape, ("path", "cmd"))
    elif t is PLAN_STEPS_SHAPE:
        item = {"type": "planSteps", "id": bb_id, "steps": shape.steps}  # type: ignore[attr-defined]
        _copy_present(item, shape, ("explanation",))
    elif t is EXTENSION_SHAPE:
        return {"type": "extension", "id": bb_id, "kind": shape.kind, "payload": shape.payload, "status": status}  # type: ignore[attr-defined]
    else:
        return None
    item["status"] = status
    return item


def _plain_shape(bb_id: str, shape: g.Shape) -> Item:
    """Shapes without status, identical at open and close."""
    t = type(shape)
    if t is AGENT_MESSAGE_SHAPE:
        return {"type": "agentMessage", "id": bb_id, "text": shape.text}  # type: ignore[attr-defined]
    if t is REASONING_SHAPE:
        return {"type": "reasoning", "id": bb_id, "summary": shape.summary, "content": shape.content}  # type: ignore[attr-defined]
    if t is PLAN_SHAPE:
        return {"type": "plan", "id": bb_id, "text": shape.text}  # type: ignore[attr-defined]
    if t is IMAGE_VIEW_SHAPE:
        return {"type": "imageView", "id": bb_id, "path": shape.path}  # type: ignore[attr-defined]
    if t is COMPACTION_SHAPE:
        return {"type": "contextCompaction", "id": bb_id}
    raise AssertionError(f"no plain builder for {t.__name__}")


# -- B-open / B-close --------------------------------------------------------


def open_item(bb_id: str, shape: g.Shape, parent: str | None, pres: Any) -> Item:
    """B-open: the pending item an `item.open` announces."""
    t = type(shape)
    if t is COMMAND_SHAPE:
        shape = cast("g.CommandShape", shape)
        item: Item = {"type": "commandExecution", "id": bb_id, "command": shape.command, "cwd": shape.cwd}
        _copy_present(item, shape, ("aggregatedOutput", "exitCode", "durationMs"))
        item["status"] = "pending"
        item["approvalStatus"] = None
    elif t is TOOL_SHAPE:
        shape = cast("g.ToolShape", shape)
        item = {"type": "toolCall", "id": bb_id}
        _tool_core(item, shape, "pending")
        _copy_present(item, shape, ("result", "error", "durationMs"))
    elif t is FILE_CHANGE_SHAPE:
        shape = cast("g.FileChangeShape", shape)
        item = {
            "type": "fileChange",
            "id": bb_id,
            "changes": file_changes(shape.changes),
            "status": "pending",
            "approvalStatus": None,
        }
    elif t is WEB_SEARCH_SHAPE:
        shape = cast("g.WebSearchShape", shape)
        item = {"type": "webSearch", "id": bb_id, "queries": shape.queries, "resultText": None}
    elif t is WEB_FETCH_SHAPE:
        shape = cast("g.WebFetchShape", shape)
        item = _web_fetch(bb_id, shape, None)
    elif t is BACKGROUND_TASK_SHAPE:
        shape = cast("g.BackgroundTaskShape", shape)
        return _finish(task_item(bb_id, shape, None), parent, pres)
    elif t is DELEGATION_SHAPE:
        shape = cast("g.DelegationShape", shape)
        return delegation_item(bb_id, shape, "pending", shape.summary, parent, pres)
    elif t is EXTENSION_SHAPE:
        item = _status_shape(bb_id, shape, "pending")  # type: ignore[assignment]
        item["presentation"] = pres
        return _finish(item, parent, UNSET)
    else:
        built = _status_shape(bb_id, shape, "pending")
        item = built if built is not None else _plain_shape(bb_id, shape)
    return _finish(item, parent, pres)


def _web_fetch(bb_id: str, shape: g.WebFetchShape, result_text: str | None) -> Item:
    prompt = None if shape.prompt is UNSET else shape.prompt
    return {
        "type": "webFetch",
        "id": bb_id,
        "url": shape.url,
        "prompt": prompt,
        "pattern": shape.pattern,
        "resultText": result_text,
    }


def close_item(
    bb_id: str,
    shape: g.Shape,
    close: g.ItemClose,
    opened_summary: Any,
    parent: str | None,
    pres: Any,
) -> Item:
    """B-close: the terminal item of an `item.close`, the close's shape winning."""
    t = type(shape)
    status = close.status
    result_text = None if close.resultText is UNSET else close.resultText
    if t is COMMAND_SHAPE:
        shape = cast("g.CommandShape", shape)
        item: Item = {"type": "commandExecution", "id": bb_id, "command": shape.command, "cwd": shape.cwd}
        out = close.aggregatedOutput if close.aggregatedOutput is not UNSET else shape.aggregatedOutput
        if out is not UNSET:
            item["aggregatedOutput"] = out
        code = close.exitCode if close.exitCode is not UNSET else shape.exitCode
        if code is not UNSET:
            item["exitCode"] = code
        if shape.durationMs is not UNSET:
            item["durationMs"] = shape.durationMs
        item["status"] = status
        item["approvalStatus"] = None if close.approvalStatus is UNSET else close.approvalStatus
    elif t is TOOL_SHAPE:
        shape = cast("g.ToolShape", shape)
        item = {"type": "toolCall", "id": bb_id}
        _tool_core(item, shape, status)
        if shape.result is not UNSET and shape.result is not None:
            item["result"] = shape.result
        elif result_text is not None:
            item["result"] = result_text
        _copy_present(item, shape, ("error", "durationMs"))
    elif t is FILE_CHANGE_SHAPE:
        shape = cast("g.FileChangeShape", shape)
        approval = None if close.approvalStatus is UNSET else close.approvalStatus
        item = {
            "type": "fileChange",
            "id": bb_id,
            "changes": file_changes(shape.changes),
            "status": status,
            "approvalStatus": approval,
        }
    elif t is WEB_SEARCH_SHAPE:
        shape = cast("g.WebSearchShape", shape)
        item = {"type": "webSearch", "id": bb_id, "queries": shape.queries, "resultText": result_text}
    elif t is WEB_FETCH_SHAPE:
        shape = cast("g.WebFetchShape", shape)
        item = _web_fetch(bb_id, shape, result_text)
    elif t is BACKGROUND_TASK_SHAPE:
        shape = cast("g.BackgroundTaskShape", shape)
        return _finish(task_item(bb_id, shape, None), parent, pres)
    elif t is DELEGATION_SHAPE:
        shape = cast("g.DelegationShape", shape)
        summary = shape.summary if shape.summary is not UNSET else opened_summary
        return delegation_item(bb_id, shape, status, summary, parent, pres)
    elif t is EXTENSION_SHAPE:
        item = _status_shape(bb_id, shape, status)  # type: ignore[assignment]
        item["presentation"] = pres
        return _finish(item, parent, UNSET)
    else:
        built = _status_shape(bb_id, shape, status)
        item = built if built is not None else _plain_shape(bb_id, shape)
    return _finish(item, parent, pres)


# shape tag -> canonical item type, for the dual-settle match test
SHAPE_ITEM_TYPE: Final = {
    "command": "commandExecution", "fileChange": "fileChange", "tool": "toolCall",
    "compaction": "contextCompaction", "agentMessage": "agentMessage", "reasoning": "reasoning",
    "plan": "plan", "webSearch": "webSearch", "webFetch": "webFetch", "imageView": "imageView",
    "backgroundTask": "backgroundTask", "fileRead": "fileRead", "search": "search",
    "delegation": "delegation", "planSteps": "planSteps", "extension": "extension",
}  # fmt: skip


def shape_tag(shape: g.Shape) -> str:
    return shape.__struct_config__.tag  # type: ignore[return-value]


def shape_matches(shape: g.Shape, opened: Item) -> bool:
    if SHAPE_ITEM_TYPE[shape_tag(shape)] != opened["type"]:
        return False
    return type(shape) is not EXTENSION_SHAPE or shape.kind == opened["kind"]


# -- B-echo / B-text / B-bare-text --------------------------------------------

_REBUILT: Final = ("fileRead", "search", "planSteps", "delegation", "extension")


def echo_item(opened: Item, status: str, close: g.ItemClose | None, parent: str | None) -> Item:
    """B-echo: settle an opened item from its own started fields."""
    kind = opened["type"]
    if parent is None:
        parent = opened.get("parentToolCallId")
    if kind == "commandExecution":
        item: Item = {"type": kind, "id": opened["id"], "command": opened["command"], "cwd": opened["cwd"]}
        if close is not None and close.aggregatedOutput is not UNSET:
            item["aggregatedOutput"] = close.aggregatedOutput
        if close is not None and close.exitCode is not UNSET:
            item["exitCode"] = close.exitCode
        item["status"] = status
        item["approvalStatus"] = opened["approvalStatus"]
    elif kind == "fileChange":
        item = {
            "type": kind,
            "id": opened["id"],
            "changes": opened["changes"],
            "status": status,
            "approvalStatus": opened["approvalStatus"],
        }
    elif kind == "toolCall":
        item = {"type": kind, "id": opened["id"], "tool": opened["tool"]}
        if "arguments" in opened:
            item["arguments"] = opened["arguments"]
        item["status"] = status
        if close is not None and close.resultText is not UNSET:
            item["result"] = close.resultText
    elif kind == "contextCompaction":
        item = {"type": kind, "id": opened["id"]}
    elif kind in _REBUILT:
        item = {}
        for name, value in opened.items():
            if name in ("parentToolCallId", "presentation"):
                continue
            item[name] = status if name == "status" else value
        if kind == "extension":
            item["presentation"] = opened["presentation"]
    else:
        return opened
    return _finish(item, parent, UNSET)


def text_item(opened: Item, main: str, summary: str) -> Item | None:
    """B-text core for an open text record (already resolved main/summary text)."""
    kind = opened["type"]
    bb_id = opened["id"]
    if kind == "agentMessage" or kind == "plan":
        item: Item = {"type": kind, "id": bb_id, "text": main}
    elif kind == "reasoning":
        item = {"type": kind, "id": bb_id, "summary": [summary] if summary else [], "content": [main] if main else []}
    else:
        return None
    return _finish(item, opened.get("parentToolCallId"), opened.get("presentation", UNSET))


def bare_text_item(bb_id: str, channel: str, text: str, parent: str | None) -> Item:
    if channel == "agentMessage" or channel == "plan":
        item: Item = {"type": channel, "id": bb_id, "text": text}
    elif channel == "reasoningText":
        item = {"type": "reasoning", "id": bb_id, "summary": [], "content": [text]}
    else:
        item = {"type": "reasoning", "id": bb_id, "summary": [text], "content": []}
    return _finish(item, parent, UNSET)


def synthesized_text_item(bb_id: str, channel: str, parent: str | None) -> Item:
    """The empty item a delta-first text stream opens with."""
    if channel == "agentMessage" or channel == "plan":
        item: Item = {"type": channel, "id": bb_id, "text": ""}
    else:
        item = {"type": "reasoning", "id": bb_id, "summary": [], "content": []}
    return _finish(item, parent, UNSET)


_JS_WHITESPACE: Final = frozenset(js.WHITESPACE)


def is_js_blank(text: str) -> bool:
    """True when ECMAScript `trim()` would leave nothing (not Python's `strip` set)."""
    return all(ch in _JS_WHITESPACE for ch in text)
