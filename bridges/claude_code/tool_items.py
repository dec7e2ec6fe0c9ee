"""Claude Code tool calls as timeline items (spec §4.5.1, §4.5.3, §4.6, §4.6.2).

A `tool_use` block is classified once, when the assistant message announces it; the result reuses that
classification (the started-tool cache), so the item's shape and row never change between open and close.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from msgspec import UNSET

from bbridge.core import grammar as g
from bbridge.core import js
from bbridge.kit.result_text import ResultText
from bridges.claude_code import presentation as p

BB_SERVER = "bb-bridge"
NO_OUTPUT = "(Bash completed with no output)"
DENIED_INPUT_UNITS = 600
_MCP_NAME = re.compile(r"^mcp__(.+?)__(.+)$", re.DOTALL)
_STRIPPED_SUMMARY_PREFIXES = ("agentId:", "<usage>")


@dataclass(frozen=True, slots=True)
class Classified:
    """A tool call's item shape and row, as opened."""

    item: g.ItemShape
    presentation: g.Presentation


def usable(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _strings(value: Any, *names: str) -> bool:
    """An object whose named members are strings where present."""
    return isinstance(value, dict) and all(isinstance(value.get(n), str) for n in names if n in value)


def generic(name: str, tool_input: Any) -> Classified:
    """The fallback shape: a named tool with its arguments when they are an object."""
    args = tool_input if isinstance(tool_input, dict) else UNSET
    return Classified(g.ToolShape(tool=name, args=args), p.builtin(name, tool_input))


def classify(
    name: str, call_id: str, tool_input: Any, bb_tools: Mapping[str, g.Presentation | None] | None = None
) -> Classified:
    """The item a `tool_use` block opens (§4.5.1)."""
    i = tool_input
    if name == "Bash" and _strings(i, "command", "cwd") and usable(i.get("command")):
        cwd = i.get("cwd", "")
        return Classified(
            g.CommandShape(command=i["command"], cwd=cwd), p.command(i["command"], i.get("run_in_background") is True)
        )
    if name == "Read" and _strings(i, "file_path", "path"):
        path = i["file_path"] if "file_path" in i else i.get("path")
        if usable(path):
            return Classified(g.FileReadShape(path=path), p.file_read(path))
    if name in ("Grep", "Glob") and _strings(i, "pattern", "path") and usable(i.get("pattern")):
        mode: Literal["content", "path"] = "content" if name == "Grep" else "path"
        where = i["path"] if usable(i.get("path")) else UNSET
        return Classified(
            g.SearchShape(mode=mode, query=i["pattern"], path=where), p.search(i["pattern"], name == "Glob")
        )
    if name == "MultiEdit" and _multi_edit(i):
        changes = [
            g.FileChangeEntry(path=i["file_path"], kind="update", oldText=e["old_string"], newText=e["new_string"])
            for e in i["edits"]
        ]
        return Classified(g.FileChangeShape(changes=changes), p.file_change("edit", i["file_path"]))
    if name in ("Edit", "Write", "MultiEdit"):
        return _edit(name, i)
    if name == "NotebookEdit" and _strings(i, "new_source") and isinstance(i.get("notebook_path"), str):
        entry = g.FileChangeEntry(path=i["notebook_path"], kind="update", newText=i.get("new_source", UNSET))
        return Classified(g.FileChangeShape(changes=[entry]), p.file_change("notebook", i["notebook_path"]))
    if name == "WebSearch" and isinstance(i, dict) and usable(i.get("query")):
        return Classified(g.WebSearchShape(queries=[i["query"]]), p.web_search(i["query"]))
    if name == "WebFetch" and isinstance(i, dict) and usable(i.get("url")):
        prompt = i["prompt"] if isinstance(i.get("prompt"), str) else None
        return Classified(g.WebFetchShape(url=i["url"], prompt=prompt, pattern=None), p.web_fetch(i["url"]))
    if name in ("Agent", "Task") and _delegation_input(i):
        background = i.get("run_in_background") is True
        label = _delegation_label(name, i)
        item = g.DelegationShape(childRef=call_id, label=label, background=background)
        return Classified(item, p.delegation(label, background, i.get("subagent_type"), i.get("model")))
    mcp = _MCP_NAME.match(name)
    if mcp is not None:
        server, tool = mcp.group(1), mcp.group(2)
        args = i if isinstance(i, dict) else UNSET
        if server == BB_SERVER:
            # the client's declared presentation: the reference drops it (spec §10.2), we show it on purpose
            declared = (bb_tools or {}).get(tool)
            return Classified(g.ToolShape(tool=tool, server="bb", args=args), declared or p.bb_tool(tool))
        return Classified(g.ToolShape(tool=tool, server=server, args=args), p.mcp_tool(server, tool))
    return generic(name, i)


def _multi_edit(i: Any) -> bool:
    return (
        isinstance(i, dict)
        and isinstance(i.get("file_path"), str)
        and isinstance(i.get("edits"), list)
        and all(
            isinstance(e, dict) and isinstance(e.get("old_string"), str) and isinstance(e.get("new_string"), str)
            for e in i["edits"]
        )
    )


def _edit(name: str, i: Any) -> Classified:
    """`Edit` / `Write` and the `MultiEdit` fallback (§4.5.3)."""
    if not _strings(i, "file_path", "path", "old_string", "new_string", "content"):
        return generic(name, i)
    verb: p.FileVerb = "write" if name == "Write" else "edit"
    path = i["file_path"] if "file_path" in i else i.get("path")
    if not usable(path):
        return Classified(g.ToolShape(tool=name, args=i), p.file_change(verb))
    new_text = i["new_string"] if "new_string" in i else i.get("content", UNSET)
    if "old_string" in i:
        entry = g.FileChangeEntry(path=path, kind="update", oldText=i["old_string"], newText=new_text)
    else:
        entry = g.FileChangeEntry(path=path, kind="add", newText=new_text)
    return Classified(g.FileChangeShape(changes=[entry]), p.file_change(verb, path))


def _delegation_input(i: Any) -> bool:
    if not _strings(i, "description", "prompt", "subagent_type", "model"):
        return False
    return "run_in_background" not in i or isinstance(i["run_in_background"], bool)


def _delegation_label(name: str, i: dict[str, Any]) -> str:
    if isinstance(i.get("description"), str):
        return str(i["description"])
    if isinstance(i.get("prompt"), str):
        return js.trim(i["prompt"].split("\n", 1)[0])
    if isinstance(i.get("subagent_type"), str):
        return str(i["subagent_type"])
    return name


def fallback(tool_name: Any) -> Classified:
    """A result whose call this translator never saw opened (§4.6 step 1): classified by the block's name."""
    if tool_name == "Bash":
        return Classified(g.CommandShape(command="", cwd=""), p.command(""))
    if tool_name in ("Edit", "Write", "MultiEdit", "NotebookEdit"):
        verb: p.FileVerb = "write" if tool_name == "Write" else "notebook" if tool_name == "NotebookEdit" else "edit"
        return Classified(g.FileChangeShape(changes=[]), p.file_change(verb))
    name = tool_name if isinstance(tool_name, str) else "unknown"
    return Classified(g.ToolShape(tool=name), p.builtin(name, None))


# -- results -------------------------------------------------------------------


# §4.6's generic extractor of a tool result's text is the kit's, with its default (Claude Code's) rules.
result_text = ResultText()


def _command_text(text: str) -> str | None:
    return None if text == "" or js.trim(text) == NO_OUTPUT else text


def command_output(content: Any, tool_use_result: Any) -> str | None:
    """A command's output: the block's structured result before its text, the no-output placeholder absent."""
    text = _command_text(result_text(content))
    if isinstance(tool_use_result, str):
        own = _command_text(tool_use_result)
        return own if own is not None else text
    if isinstance(tool_use_result, dict):
        out, err = tool_use_result.get("stdout", ""), tool_use_result.get("stderr", "")
        if out == "":
            combined = err or None
        elif err == "":
            combined = out
        else:
            combined = out + err if out.endswith("\n") else f"{out}\n{err}"
        return combined if combined is not None else text
    return text


def stripped_summary(output: str) -> str:
    """A subagent's answer without its bookkeeping lines (`agentId:`, `<usage>`)."""
    lines = [js.trim_end(line) for line in output.split("\n")]
    return js.trim("\n".join(line for line in lines if not line.startswith(_STRIPPED_SUMMARY_PREFIXES)))


def denied_input(item: g.ItemShape) -> str | None:
    """What a denied call wanted to do, for the `permission_denied` warning (§4.6.2)."""
    text: str | None = None
    if isinstance(item, g.CommandShape):
        text = item.command
    elif isinstance(item, g.FileChangeShape):
        text = ", ".join(change.path for change in item.changes) or None
    elif isinstance(item, g.WebFetchShape):
        text = item.url
    elif isinstance(item, g.WebSearchShape):
        text = ", ".join(item.queries)
    elif isinstance(item, g.ToolShape) and item.args is not UNSET:
        text = js.stringify(item.args)
    if text is None:
        return None
    text = js.trim(text)
    if g.utf16_len(text) > DENIED_INPUT_UNITS:
        text = js.cut(text, DENIED_INPUT_UNITS) + js.ELLIPSIS
    return text or None
