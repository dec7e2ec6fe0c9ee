"""How Claude Code's tools read as timeline rows (spec §4.5.2, §4.9): labels, glyphs, titles, details.

The persisted event carries this snapshot, so the tables here are the reference's, literally (the order of a
row's members on the wire is `translate.delta_params`'s).
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import UNSET

from bbridge.core import grammar as g
from bbridge.core import js

TITLE_UNITS = 160
DETAIL_UNITS = 280
FileVerb = Literal["edit", "write", "notebook"]


def title(text: str) -> str | None:
    """The first line of the trimmed text, trimmed again and cut to 160 UTF-16 units; None when empty."""
    first = js.trim(js.trim(text).split("\n", 1)[0])
    return js.limit(first, TITLE_UNITS) if first else None


def file_name(path: str) -> str:
    segments = [segment for segment in path.split("/") if segment]
    return segments[-1] if segments else path


def make(
    pending: str,
    completed: str,
    glyph: str,
    title: str | None = None,
    *,
    suppress: bool = False,
    detail: str | None = None,
) -> g.Presentation:
    return g.Presentation(
        label=g.Label(pending=pending, completed=completed),
        icon=g.Icon(glyph=glyph),
        suppress=True if suppress else UNSET,
        title=UNSET if title is None else title,
        detail=UNSET if detail is None else detail,
    )


def _string_title(value: Any) -> str | None:
    return title(value) if isinstance(value, str) else None


def command(text: str, background: bool = False) -> g.Presentation:
    if background:
        return make("Starting background command", "Started background command", "Terminal", title(text))
    return make("Running command", "Ran command", "Terminal", title(text))


def file_read(path: str) -> g.Presentation:
    return make("Reading file", "Read file", "FileText", title(file_name(path)))


def search(pattern: str, glob: bool) -> g.Presentation:
    if glob:
        return make("Finding files", "Found files", "FolderOpen", title(pattern))
    return make("Searching files", "Searched files", "Search", title(pattern))


_FILE_VERBS: dict[FileVerb, tuple[str, str]] = {
    "edit": ("Editing file", "Edited file"),
    "write": ("Writing file", "Wrote file"),
    "notebook": ("Editing notebook", "Edited notebook"),
}


def file_change(verb: FileVerb, path: str | None = None) -> g.Presentation:
    pending, completed = _FILE_VERBS[verb]
    return make(pending, completed, "EditFile", None if path is None else title(file_name(path)))


def web_search(query: str) -> g.Presentation:
    return make("Searching the web", "Searched the web", "Globe", title(query))


def web_fetch(url: str) -> g.Presentation:
    return make("Fetching page", "Fetched page", "Browser", title(url))


def delegation(label: str, background: bool, subagent_type: Any, model: Any) -> g.Presentation:
    parts = [f"{subagent_type} agent"] if isinstance(subagent_type, str) else []
    if isinstance(model, str):
        parts.append(f"model {model}")
    detail = js.limit(" · ".join(parts), DETAIL_UNITS) if parts else None
    if background:
        return make("Launching subagent", "Launched subagent", "UserRound", title(label), detail=detail)
    return make("Running subagent", "Subagent finished", "UserRound", title(label), detail=detail)


def bb_tool(tool: str) -> g.Presentation:
    return make(f"Running {tool}", f"Ran {tool}", "Toolbox")


def mcp_tool(server: str, tool: str) -> g.Presentation:
    return make(f"Running {tool}", f"Ran {tool}", "Toolbox", server)


def plan_snapshot(steps: list[g.PlanStep]) -> g.Presentation:
    active = next((step.step for step in steps if step.status == "active"), None)
    return make("Updating plan", "Updated plan", "ListTodo", None if active is None else title(active), suppress=True)


COMPACTION = make("Compacting context", "Compacted context", "Archive")

# name → (pending, completed, glyph, suppress, title field)
_BUILTINS: dict[str, tuple[str, str, str, bool, str | None]] = {
    "TodoWrite": ("Updating todos", "Updated todos", "ListTodo", True, None),
    "TodoRead": ("Reading todos", "Read todos", "ListTodo", True, None),
    "TaskCreate": ("Creating task", "Created task", "ListTodo", True, "subject"),
    "TaskUpdate": ("Updating task", "Updated task", "ListTodo", True, "subject"),
    "TaskList": ("Listing tasks", "Listed tasks", "ListTodo", True, None),
    "TaskGet": ("Reading task", "Read task", "ListTodo", True, None),
    "ToolSearch": ("Searching tools", "Searched tools", "Toolbox", True, "query"),
    "TaskOutput": ("Reading task output", "Read task output", "Terminal", True, None),
    "Monitor": ("Monitoring", "Monitored", "Eye", True, "command"),
    "ScheduleWakeup": ("Scheduling wake-up", "Scheduled wake-up", "Clock", True, "reason"),
    "SendMessage": ("Messaging agent", "Messaged agent", "Sent", True, "to"),
    "AskUserQuestion": ("Asking a question", "Asked a question", "MessageQuestion", True, None),
    "EnterPlanMode": ("Entering plan mode", "Entered plan mode", "ListTodo", False, None),
    "ExitPlanMode": ("Presenting plan", "Presented plan", "FileText", False, None),
    "Workflow": ("Starting workflow", "Started workflow", "Workflow", False, None),
    "TaskStop": ("Stopping task", "Stopped task", "Terminal", False, None),
    "ListAgents": ("Listing agents", "Listed agents", "UserRound", False, None),
    "Skill": ("Loading skill", "Loaded skill", "Puzzle", False, "skill"),
    "StructuredOutput": ("Returning structured output", "Returned structured output", "Code", False, None),
    "EnterWorktree": ("Entering worktree", "Entered worktree", "GitBranch", False, None),
    "ExitWorktree": ("Leaving worktree", "Left worktree", "GitBranch", False, None),
    "LS": ("Listing directory", "Listed directory", "FolderOpen", False, "path"),
    "KillShell": ("Stopping shell", "Stopped shell", "Terminal", False, None),
    "BashOutput": ("Reading shell output", "Read shell output", "Terminal", True, None),
}


def builtin(name: str, tool_input: Any) -> g.Presentation:
    """A generic tool's row: the built-in table, else `Running <name>` with the toolbox glyph."""
    entry = _BUILTINS.get(name)
    if entry is None:
        return make(f"Running {name}", f"Ran {name}", "Toolbox")
    pending, completed, glyph, suppress, field = entry
    headline = _string_title(tool_input.get(field)) if field and isinstance(tool_input, dict) else None
    return make(pending, completed, glyph, headline, suppress=suppress)


def task(task_type: str, description: str, workflow_name: str | None) -> g.Presentation:
    """A background task's row (§4.9) by its type."""
    if task_type == "local_workflow":
        headline = title(workflow_name or description)
        return make("Running workflow", "Workflow finished", "Workflow", headline)
    if task_type == "local_bash":
        return make("Running background command", "Background command finished", "Terminal", title(description))
    return make("Running background agent", "Background agent finished", "UserRound", title(description))
