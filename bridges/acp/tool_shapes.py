"""ACP tool call → item shape and presentation (grammar v3).

The native kind picks the shape: `execute` → command, `edit`/`delete` (or any
call carrying a diff) → fileChange, `read` → fileRead, `search` → search,
`fetch` → webFetch, `think` → reasoning; everything else is a generic `tool`
named by its kind. A core shape has required fields the agent does not always
fill (Cursor's `read` and `fetch` calls carry an empty `rawInput` and no
locations): such a call stays a generic tool that presents as its kind, so a
row is never a fileRead without a path. The title is never a tool name; it is
the headline.

The command / file-change decision (`operation`) is shared with the approval
mapping, so an approval and its timeline row never disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from msgspec import UNSET

from bbridge.core import grammar as g
from bridges.acp import presentation as p
from bridges.acp.messages import JsonObject, optional_strings, output_text


@dataclass(frozen=True)
class Operation:
    """What a call does: run a `command`, change files (`file_change`), or anything else (`generic`)."""

    kind: Literal["command", "file_change", "generic"]
    command: str = ""
    change_kind: Literal["update", "delete"] = "update"
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class Classified:
    item: g.ItemShape
    presentation: g.Presentation


def _title(event: JsonObject) -> str | None:
    title = event.get("title")
    return title if isinstance(title, str) else None


def extract_command(event: JsonObject) -> str | None:
    """The shell command of a call: `rawInput.command` when non-blank, else the title."""
    raw = event.get("rawInput")
    if isinstance(raw, dict) and isinstance(raw.get("command"), str) and raw["command"].strip():
        return str(raw["command"])
    return _title(event)


def extract_paths(event: JsonObject) -> list[str]:
    """Every non-blank path a call names: diff paths, then locations, else the usual `rawInput` path fields."""
    paths = [e["path"] for e in event.get("content") or [] if e.get("type") == "diff" and e["path"].strip()]
    paths += [loc["path"] for loc in event.get("locations") or [] if loc["path"].strip()]
    if paths:
        return paths
    fields = optional_strings(event.get("rawInput"), "path", "filePath", "file_path", non_blank=True) or {}
    return [value for name in ("path", "filePath", "file_path") if (value := fields.get(name))][:1]


def operation(event: JsonObject) -> Operation:
    """An `execute` call with a command is a command; a call with a diff, or an edit/delete naming a path, changes
    files; locations alone are no write signal (read-only tools name locations too)."""
    if event.get("kind") == "execute" and (cmd := extract_command(event)):
        return Operation("command", command=cmd)
    paths = tuple(extract_paths(event))
    if not paths:
        return Operation("generic")
    has_diff = any(e.get("type") == "diff" for e in event.get("content") or [])
    if has_diff or event.get("kind") == "edit":
        return Operation("file_change", change_kind="update", paths=paths)
    if event.get("kind") == "delete":
        return Operation("file_change", change_kind="delete", paths=paths)
    return Operation("generic")


def _changes(event: JsonObject, op: Operation) -> list[g.FileChangeEntry]:
    changes = [
        g.FileChangeEntry(path=e["path"], kind="add", newText=e["newText"])
        if e.get("oldText") is None
        else g.FileChangeEntry(path=e["path"], kind="update", oldText=e["oldText"], newText=e["newText"])
        for e in event.get("content") or []
        if e.get("type") == "diff"
    ]
    if changes or not op.paths:
        return changes
    return [g.FileChangeEntry(path=op.paths[0], kind=op.change_kind)]


def _change_verb(changes: list[g.FileChangeEntry]) -> p.ChangeVerb:
    kinds = {change.kind for change in changes}
    return "add" if kinds == {"add"} else "delete" if kinds == {"delete"} else "update"


_TICKED = re.compile(r"^[^`]*`([^`\n]+)`[^`]*\Z")
_URL = re.compile(r"https?://[^\s`'\"<>]+")


def _ticked_token(title: str | None) -> str | None:
    """A single code-ticked token in a title: grok titles a read "Read `/abs/path`"."""
    match = _TICKED.match(title or "")
    token = match.group(1).strip() if match else ""
    return token or None


def _file_read(event: JsonObject, title: str | None) -> Classified | None:
    ticked = _ticked_token(title)
    paths = extract_paths(event)
    path = paths[0] if paths else ticked if ticked and ticked[0] in "/~." else None
    if path is None:
        return None
    return Classified(g.FileReadShape(path=path), p.file_read(path))


def _search(event: JsonObject) -> Classified | None:
    names = ("pattern", "query", "regex", "glob", "globPattern", "path", "directory")
    fields = optional_strings(event.get("rawInput"), *names, non_blank=True)
    if fields is None:
        return None
    content_query = fields.get("pattern") or fields.get("query") or fields.get("regex")
    mode: Literal["content", "path"] = "content" if content_query else "path"
    query = content_query or fields.get("glob") or fields.get("globPattern")
    if query is None:
        return None
    root = fields.get("path") or fields.get("directory")
    shape = g.SearchShape(mode=mode, query=query) if root is None else g.SearchShape(mode=mode, query=query, path=root)
    return Classified(shape, p.search(mode, query))


def _web_fetch(event: JsonObject, title: str | None) -> Classified | None:
    fields = optional_strings(event.get("rawInput"), "url", "uri", non_blank=True) or {}
    url = fields.get("url") or fields.get("uri")
    if url is None:
        urls = _URL.findall(title or "")
        url = urls[0] if len(urls) == 1 else None
    if url is None:
        return None
    return Classified(g.WebFetchShape(url=url, pattern=None), p.web_fetch(url))


def _reasoning(event: JsonObject) -> Classified:
    """A `think` call: the thought is its content text, else `rawInput.thought`; it may open empty."""
    fields = optional_strings(event.get("rawInput"), "thought", "thinking", non_blank=True) or {}
    thought = output_text(event) or fields.get("thought") or fields.get("thinking")
    return Classified(g.ReasoningShape(summary=[], content=[] if thought is None else [thought]), p.REASONING)


def bb_tool(
    event: JsonObject,
    tool: str,
    args: Any,
    declared: g.Presentation | None,
    *,
    status: g.ItemStatus | None = None,
    output: str | None = None,
) -> Classified:
    """A call of a thread's declared dynamic tool (through the `bb-bridge` MCP server): a `tool` item with
    `server: "bb"`, the arguments the MCP call carried (else the agent's `rawInput`), and the tool's declared
    presentation (protocol.md `DynamicTool.presentation`). The reference drops that presentation
    (claude-code-bridge.md §10.2) and no recording covers a dynamic tool call: we go past it on purpose. A settled
    call carries its output as `result`, or as `error` when it failed."""
    raw = event.get("rawInput")
    arguments = args if args is not UNSET else raw if isinstance(raw, dict) and raw else UNSET
    result = output if status == "completed" and output is not None else UNSET
    error = output if status == "failed" and output is not None else UNSET
    shape = g.ToolShape(tool=tool, server="bb", args=arguments, result=result, error=error)
    return Classified(shape, declared if declared is not None else p.bb_tool(tool))


def generic(kind: str | None, title: str | None) -> Classified:
    return Classified(g.ToolShape(tool=kind or "tool"), p.tool_kind(kind, title))


def classify(event: JsonObject) -> Classified:
    """Shape and presentation of a (merged) tool call event."""
    op = operation(event)
    if op.kind == "command":
        return Classified(g.CommandShape(command=op.command, cwd=""), p.command(op.command))
    if op.kind == "file_change" and (changes := _changes(event, op)):
        return Classified(
            g.FileChangeShape(changes=changes), p.file_change(_change_verb(changes), [c.path for c in changes])
        )
    kind, title = event.get("kind"), _title(event)
    shaped: Classified | None = None
    if kind == "read":
        shaped = _file_read(event, title)
    elif kind == "search":
        shaped = _search(event)
    elif kind == "fetch":
        shaped = _web_fetch(event, title)
    elif kind == "think":
        shaped = _reasoning(event)
    return shaped if shaped is not None else generic(kind, title)
