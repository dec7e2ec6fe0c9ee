"""Raw command-output recovery (spec §3.11): a shell command's output taken from codex's raw Responses items.

Codex's `aggregatedOutput` for a unified-exec command can lag or be missing; the raw `function_call_output`
the model saw carries the real text after a metadata header. A command close whose output is still to come
is withheld until it arrives or the turn ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from bbridge.core import grammar as g

SHELL_TOOLS = frozenset({"exec_command", "Bash", "bash"})
METADATA = ("Chunk ID:", "Wall time:", "Process exited with code ", "Original token count:")
MARKER = "Output:"


class AppendedOutputCommand(msgspec.Struct, tag_field="type", tag="command", kw_only=True):
    """A command shape whose recovered output the reference appends after the shape's last key."""

    command: str
    cwd: str
    exitCode: Any | UnsetType = UNSET
    durationMs: Any | UnsetType = UNSET
    aggregatedOutput: str


_EMPTY = object()


def output_text(output: Any) -> str | None:
    """The output's text: a string as is, parts as `[<type>]` lines (what the reference's extractor yields)."""
    if isinstance(output, str):
        raw = output
    elif isinstance(output, list):
        raw = "\n".join(f"[{part.get('type') if isinstance(part, dict) else None}]" for part in output)
    else:
        return None
    return raw.replace("\r\n", "\n").replace("\r", "\n")


def parse(text: str) -> str | object | None:
    """The command's own output (`_EMPTY` for none), or None when the header cannot be parsed."""
    if not text:
        return _EMPTY
    lines = text.split("\n")
    if lines[0] == MARKER:
        return text.split("\n", 1)[1] if "\n" in text else ""
    if not lines[0].startswith(METADATA):
        return text
    header = 0
    for index, line in enumerate(lines):
        if line == MARKER:
            return "\n".join(lines[index + 1 :])
        if line.startswith(METADATA):
            header += 1
            continue
        return None if MARKER in lines[index:] else text
    return None if header >= 2 else text


@dataclass(slots=True)
class _ThreadOutputs:
    shell_calls: set[str] = field(default_factory=set)
    captured: dict[str, str | object] = field(default_factory=dict)
    withheld: dict[str, g.ItemClose] = field(default_factory=dict)


class RawOutputs:
    """Per codex thread: shell call ids, captured outputs, withheld closes."""

    def __init__(self) -> None:
        self._threads: dict[str, _ThreadOutputs] = {}

    def drop(self, thread: str) -> None:
        self._threads.pop(thread, None)

    def raw_item(self, params: dict[str, Any]) -> list[g.Delta]:
        """`rawResponseItem/completed`: learn shell calls and outputs; a withheld close may be released."""
        thread, item = params.get("threadId"), params.get("item")
        if not isinstance(thread, str) or not isinstance(params.get("turnId"), str) or not isinstance(item, dict):
            return []
        call, kind = item.get("call_id"), item.get("type")
        if not isinstance(call, str):
            return []
        if kind == "function_call" and item.get("name") in SHELL_TOOLS:
            self._threads.setdefault(thread, _ThreadOutputs()).shell_calls.add(call)
            return []
        state = self._threads.get(thread)
        if kind != "function_call_output" or state is None or call not in state.shell_calls:
            return []
        text = output_text(item.get("output"))
        capture = parse(text) if text is not None else None
        if capture is None:
            state.shell_calls.discard(call)
        else:
            state.captured[call] = capture
        close = state.withheld.pop(call, None)
        if close is None:
            return []
        return [_repaired(close, capture) if capture is not None else close]

    def reconcile(self, thread: str | None, deltas: list[g.Delta]) -> list[g.Delta]:
        """Repair or withhold command closes; flush withheld closes ahead of the thread's boundary."""
        if thread is None:
            return deltas
        result: list[g.Delta] = []
        for delta in deltas:
            state = self._threads.get(thread)
            if isinstance(delta, g.TurnBoundary):
                if state is not None:
                    result.extend(state.withheld.values())
                    self.drop(thread)
                result.append(delta)
                continue
            call = delta.key.providerItemId if isinstance(delta, g.ItemClose) else None
            if (
                state is None
                or not isinstance(call, str)
                or not isinstance(getattr(delta, "item", None), g.CommandShape)
            ):
                result.append(delta)
                continue
            assert isinstance(delta, g.ItemClose)
            if call in state.captured:
                result.append(_repaired(delta, state.captured[call]))
            elif call in state.shell_calls:
                state.withheld[call] = delta
            else:
                result.append(delta)
        return result


def _repaired(close: g.ItemClose, capture: str | object) -> g.ItemClose:
    shape = close.item
    if not isinstance(shape, g.CommandShape):
        return close
    if capture is _EMPTY:
        fixed: Any = msgspec.structs.replace(shape, aggregatedOutput=UNSET)
    elif not isinstance(capture, str) or capture == shape.aggregatedOutput:
        return close
    elif shape.aggregatedOutput is not UNSET:
        fixed = msgspec.structs.replace(shape, aggregatedOutput=capture)
    else:
        fixed = AppendedOutputCommand(
            command=shape.command,
            cwd=shape.cwd,
            exitCode=shape.exitCode,
            durationMs=shape.durationMs,
            aggregatedOutput=capture,
        )
    return msgspec.structs.replace(close, item=fixed)
