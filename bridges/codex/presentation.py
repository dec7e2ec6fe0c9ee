"""Item presentations (spec §3.5): labels, glyphs and titles the reference attaches to every item delta."""

from __future__ import annotations

import re
from collections.abc import Sequence

from bbridge.core import grammar as g
from bbridge.core import js

TITLE_LIMIT = 160

_WS = "[\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
_SHELL = re.compile(rf"^(?:\S*/)?(?:sh|bash|zsh){_WS}+-l?c{_WS}+(.*)$", re.DOTALL)

COLLAB_LABELS = {
    "spawnAgent": ("Spawning agent", "Spawned agent"),
    "wait": ("Waiting for agents", "Waited for agents"),
    "resumeAgent": ("Resuming agent", "Resumed agent"),
    "sendInput": ("Messaging agent", "Messaged agent"),
    "closeAgent": ("Closing agent", "Closed agent"),
}


def make(pending: str, completed: str, glyph: str, title: str | None = None) -> g.Presentation:
    shown = g.Presentation(label=g.Label(pending=pending, completed=completed), icon=g.Icon(glyph=glyph))
    if title is not None:
        shown.title = title
    return shown


def title(text: str | None) -> str | None:
    """T(text): the trimmed first line, limited; never an empty title."""
    if text is None:
        return None
    first = js.trim(js.trim(text).split("\n", 1)[0])
    return js.limit(first, TITLE_LIMIT) if first else None


def unwrap_command(command: str) -> str:
    """`bash -lc '…'` → `…`: the title shows what the shell runs, not the wrapper."""
    text = js.trim(command)
    match = _SHELL.match(text)
    if match is None:
        return text
    rest = js.trim(match.group(1))
    if len(rest) >= 2 and rest[0] == rest[-1] and rest[0] in "\"'":
        return rest[1:-1]
    return rest


def file_name(path: str) -> str:
    parts = [part for part in path.split("/") if part]
    return parts[-1] if parts else path


def command(text: str) -> g.Presentation:
    return make("Running command", "Ran command", "Terminal", title(unwrap_command(text)))


def file_change(paths: Sequence[str]) -> g.Presentation:
    names = list(dict.fromkeys(file_name(path) for path in paths))
    if len(names) == 1:
        return make("Editing file", "Edited file", "EditFile", title(names[0]))
    return make("Editing files", "Edited files", "EditFile", title(", ".join(names)))


def mcp_tool(server: str, tool: str, arguments: object) -> g.Presentation:
    if server == "node_repl" and tool == "js_reset":
        return make("Resetting JavaScript session", "Reset JavaScript session", "Code")
    if server == "node_repl" and tool == "js":
        named = arguments.get("title") if isinstance(arguments, dict) else None
        return make("Running JavaScript", "Ran JavaScript", "Code", title(named) if isinstance(named, str) else None)
    return make(f"Running {tool}", f"Ran {tool}", "Toolbox", server)


def collab(tool: str, prompt: str | None) -> g.Presentation:
    pending, completed = COLLAB_LABELS.get(tool, (f"Running {tool}", f"Ran {tool}"))
    return make(pending, completed, "UserRound", title(prompt))


def subagent(agent_path: str) -> g.Presentation:
    return make("Running agent", "Agent finished", "UserRound", title(agent_path))


AGENT_MESSAGE = make("Responding", "Responded", "MessageSquare")
REASONING = make("Thinking", "Thought", "Brain")
PLAN = make("Writing plan", "Wrote plan", "ListTodo")
COMPACTION = make("Compacting context", "Compacted context", "Archive")
