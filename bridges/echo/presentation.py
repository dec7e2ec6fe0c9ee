"""How the echo bridge's rows look: the `deltas:all` rows' label and icon, and a `tool:<name>` call's."""

from __future__ import annotations

from msgspec import UNSET

from bbridge.core import grammar as g
from bbridge.wire import protocol

PRESENTATION = g.Presentation(label=g.Label(pending="Echoing", completed="Echoed"), icon=g.Icon(glyph="Sparkles"))
TOOL_PRESENTATION = g.Presentation(
    label=g.Label(pending="Calling tool", completed="Called tool"), icon=g.Icon(glyph="Wrench")
)


def tool_presentation(declared: protocol.DynamicTool | None) -> g.Presentation:
    """A called tool's row: the presentation the client declared with the tool, else the bridge's own."""
    if declared is not None and declared.presentation is not UNSET:
        return declared.presentation
    return TOOL_PRESENTATION
