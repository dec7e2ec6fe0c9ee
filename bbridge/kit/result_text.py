"""A tool result as text: the extractor three reference bridges wrote alike, so it is written once here.

Claude Code (claude-code-bridge.md §4.6), pi ([T27] in pi-bridge.md) and the ACP bridge (a tool call's `rawOutput`)
read a result the same way: null → `""`; a string → itself; a number or boolean → its JavaScript JSON; an object
with an array `content` → the text of that array; another object → its JSON; an array whose every block is a
`tool_reference` → `Matched tools: <names joined by ", ">`; any other array → each block's text (a `text` block) or
label (`[<type>: <path | tool_name | url | imageUrl>]`, else `[<type>]`) joined by `\\n`; anything else → `""`.
Their references differ only in which blanks count; a bridge states its own as a `ResultText` and calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bbridge.core import js

_LABELS = ("path", "tool_name", "url", "imageUrl")


@dataclass(frozen=True)
class ResultText:
    """One reference's result-text rules; calling it renders a value. The defaults are Claude Code's (§4.6)."""

    any_tool_name: bool = False
    """A `tool_reference` block needs only a `tool_name` member, of any value (pi), not a non-empty string."""
    blank_labels: bool = False
    """A blank `path`/`tool_name`/`url`/`imageUrl` still labels a block (pi), where the others try the next one."""
    blank_types: bool = True
    """A block whose `type` is `""` is labelled `[]`; ACP's reference skips it."""

    def __call__(self, value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, str):
            return value
        if isinstance(value, bool | int | float):
            return js.stringify(value)
        if isinstance(value, dict):
            inner = value.get("content")
            return self(inner) if isinstance(inner, list) else js.stringify(value)
        if not isinstance(value, list):
            return ""
        if value and all(self._is_reference(block) for block in value):
            return "Matched tools: " + ", ".join(str(block["tool_name"]) for block in value)
        return "\n".join(text for text in map(self._block_text, value) if text is not None)

    def _is_reference(self, block: Any) -> bool:
        if not isinstance(block, dict) or block.get("type") != "tool_reference":
            return False
        if self.any_tool_name:
            return "tool_name" in block
        name = block.get("tool_name")
        return isinstance(name, str) and name != ""

    def _block_text(self, block: Any) -> str | None:
        """A block's text or label; None for a block that contributes nothing (no object, no string `type`)."""
        if not isinstance(block, dict):
            return None
        kind = block.get("type")
        if not isinstance(kind, str) or (kind == "" and not self.blank_types):
            return None
        if kind == "text" and isinstance(block.get("text"), str):
            return str(block["text"])
        for name in _LABELS:
            label = block.get(name)
            if isinstance(label, str) and (label != "" or self.blank_labels):
                return f"[{kind}: {label}]"
        return f"[{kind}]"
