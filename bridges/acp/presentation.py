"""How ACP tool calls read as timeline rows: a label pair, a host glyph and the agent's title as headline.

ACP describes a call by a native kind and a human title ("Read File", "`touch a.txt`", "MCP: tool"). The
persisted event carries this snapshot, so a row reads the same after the bridge changes; core keeps no table of
ACP kinds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from msgspec import UNSET

from bbridge.core import grammar as g

TITLE_MAX_LENGTH = 160
ChangeVerb = Literal["add", "update", "delete"]


def headline(text: str) -> str | None:
    """One short line: the first line of the text, cut to 160 characters with an ellipsis."""
    first = text.strip().split("\n", 1)[0].strip()
    if not first:
        return None
    return first if len(first) <= TITLE_MAX_LENGTH else f"{first[: TITLE_MAX_LENGTH - 1]}…"


def presentation(
    pending: str, completed: str, glyph: str, title: str | None = None, *, suppress: bool = False
) -> g.Presentation:
    return g.Presentation(
        label=g.Label(pending=pending, completed=completed),
        icon=g.Icon(glyph=glyph),
        title=UNSET if title is None else title,
        suppress=True if suppress else UNSET,
    )


def file_name(path: str) -> str:
    segments = [segment for segment in path.split("/") if segment]
    return segments[-1] if segments else path


def _strip_ticks(text: str) -> str:
    """Agents wrap a command title in Markdown code ticks (Cursor: "`sleep 2`"); the headline shows the command."""
    trimmed = text.strip()
    return trimmed[1:-1] if len(trimmed) >= 2 and trimmed.startswith("`") and trimmed.endswith("`") else trimmed


COMPACTION = presentation("Compacting context", "Compacted context", "Archive")


def command(cmd: str) -> g.Presentation:
    return presentation("Running command", "Ran command", "Terminal", headline(_strip_ticks(cmd)))


def file_change(verb: ChangeVerb, paths: Sequence[str]) -> g.Presentation:
    """The verb comes from the change kinds; the headline lists the file names."""
    names = list(dict.fromkeys(file_name(p) for p in paths))
    many = len(names) > 1
    if verb == "add":
        labels = ("Writing files", "Wrote files") if many else ("Writing file", "Wrote file")
    elif verb == "delete":
        labels = ("Deleting files", "Deleted files") if many else ("Deleting file", "Deleted file")
    else:
        labels = ("Editing files", "Edited files") if many else ("Editing file", "Edited file")
    title = headline(", ".join(names)) if names else None
    return presentation(*labels, "Trash2" if verb == "delete" else "EditFile", title)


def file_read(path: str) -> g.Presentation:
    return presentation("Reading file", "Read file", "FileText", headline(file_name(path)))


def search(mode: Literal["content", "path"], query: str) -> g.Presentation:
    """`content` searches inside files; `path` matches file names."""
    if mode == "content":
        return presentation("Searching files", "Searched files", "Search", headline(query))
    return presentation("Finding files", "Found files", "FolderOpen", headline(query))


def web_fetch(url: str) -> g.Presentation:
    return presentation("Fetching page", "Fetched page", "Browser", headline(url))


REASONING = presentation("Thinking", "Thought", "Brain")


def plan_steps(steps: Sequence[g.PlanStep]) -> g.Presentation:
    """Headline: the step in progress. Suppressed: the todo banner reads the snapshot; the row is bookkeeping."""
    active = next((step for step in steps if step.status == "active"), None)
    return presentation(
        "Updating plan", "Updated plan", "ListTodo", None if active is None else headline(active.step), suppress=True
    )


_KINDS: dict[str, tuple[str, str, str]] = {
    "read": ("Reading file", "Read file", "FileText"),
    "edit": ("Editing file", "Edited file", "EditFile"),
    "delete": ("Deleting file", "Deleted file", "Trash2"),
    "move": ("Moving file", "Moved file", "FolderEdit"),
    "search": ("Searching", "Searched", "Search"),
    "execute": ("Running command", "Ran command", "Terminal"),
    "think": ("Thinking", "Thought", "Brain"),
    "fetch": ("Fetching", "Fetched", "Globe"),
    "other": ("Running tool", "Ran tool", "Toolbox"),
}


def bb_tool(tool: str) -> g.Presentation:
    """A declared dynamic tool that carries no presentation of its own."""
    return presentation(f"Running {tool}", f"Ran {tool}", "Toolbox")


def tool_kind(kind: str | None, title: str | None) -> g.Presentation:
    """A call with no core shape (or one the agent left unfilled): the kind's label, the agent's title."""
    return presentation(*_KINDS[kind or "other"], None if title is None else headline(title))
