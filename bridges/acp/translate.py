"""ACP session updates → `thread/delta` deltas: the bridge knows the dialect, the assembler the timeline.

Turn and item ids, pairing, settlement and text accumulation are the
assembler's; this module owns what only the dialect knows:

* the tool-call merge cache — `tool_call_update` carries only the fields that
  changed, so each update is merged into the call it updates before it is
  classified, and calls the agent never settled are closed at the turn's end
  (oldest first) with the turn's status;
* the stream flush triggers — the thought stream closes when a message chunk
  or a tool call arrives, the message stream when a tool call arrives, both at
  the turn's end;
* the stop-reason mapping (`end_turn` completed, `cancelled` interrupted,
  anything else failed);
* visibility — an update with no translation is never dropped: it becomes an
  `unhandled` delta, shown outside a turn only (`onlyIfNoTurn`) when its kind is
  known noise or an in-progress tick, always when its kind is unknown;
* the thread's declared tools — a call the agent makes through the `bb-bridge`
  MCP server is a `tool` item with `server: "bb"` and the tool's declared
  presentation (`bb_tool`). ACP names no MCP server or tool on a `tool_call`, so
  a call is recognised by its title or `_meta` naming `bb-bridge` and a declared
  tool, else by the MCP `tools/call` the bridge relayed (`mcp_called`): the
  same arguments, or the only open generic call whose title mentions MCP or the
  tool. A call recognised only after it opened takes the declared shape from
  its next update (its close at the latest).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

from msgspec import UNSET

from bbridge.core import grammar as g
from bridges.acp import presentation as p
from bridges.acp.messages import (
    TOOL_CALL_FIELDS,
    JsonObject,
    non_negative_int,
    output_text,
    plan_entries,
    text_of,
    tool_call_event,
)
from bridges.acp.tool_shapes import Classified, bb_tool, classify

UPDATE_METHOD = "acp/update"
FS_WRITE_METHOD = "acp/fs/write"
THOUGHT = g.ItemKey(channel="thought")
ASSISTANT = g.ItemKey(channel="assistant")
PLAN_STEPS = g.ItemKey(channel="planSteps")
COMPACTION = g.ItemKey(channel="compaction")
FS_WRITE = g.ItemKey(channel="fs-write")
# Update kinds an agent may send that the timeline deliberately does not render (replayed history, mode/command
# metadata): reported only outside a turn.
NOISE_UPDATES = frozenset(
    {"user_message_chunk", "available_commands_update", "current_mode_update", "config_option_update"}
)
STEP_STATUS: dict[str, Literal["pending", "active", "completed"]] = {
    "pending": "pending",
    "in_progress": "active",
    "completed": "completed",
}
TurnStatus = Literal["completed", "interrupted", "failed"]
BB_SERVER = "bb-bridge"
# How agents title a call of an MCP tool: `mcp__bb-bridge__lookup` (Claude Code), `bb-bridge/lookup`,
# `Tool: bb-bridge/lookup` (Codex), `lookup (bb-bridge MCP Server)` (Gemini CLI).
_SERVER_TOOL = re.compile(r"(?:mcp__)?bb[-_]bridge(?:__|[/.:]\s*|\s+[-–:]\s*)(?P<tool>[\w.-]+)")
_TOOL_SERVER = re.compile(r"(?P<tool>[\w.-]+)\s+\(bb[-_]bridge MCP Server\)")
RECENT_MCP_CALLS = 16


def turn_status(stop_reason: str) -> TurnStatus:
    return "completed" if stop_reason == "end_turn" else "interrupted" if stop_reason == "cancelled" else "failed"


def _item_status(status: Any) -> g.ItemStatus:
    return "completed" if status == "completed" else "failed" if status == "failed" else "pending"


def _terminal(status: Any) -> bool:
    return status in ("completed", "failed")


class Translator:
    """One ACP session's translation state: the merge cache of unsettled tool calls."""

    def __init__(self, thread_id: str, tools: Mapping[str, g.Presentation | None] | None = None) -> None:
        self.thread_id = thread_id
        self.calls: dict[str, JsonObject] = {}  # toolCallId → merged event, in announcement order
        self.tools = dict(tools or {})  # declared dynamic tool → its presentation (None: the default one)
        self.claimed: dict[str, tuple[str, Any]] = {}  # toolCallId → (declared tool, MCP arguments or UNSET)
        self.relayed: deque[tuple[str, Any]] = deque(maxlen=RECENT_MCP_CALLS)  # MCP calls with no ACP call yet

    def call(self, tool_call_id: str) -> JsonObject | None:
        """The merged event of an unsettled call (the permission mapping reads the call a permission belongs to)."""
        return self.calls.get(tool_call_id)

    # -- declared tools -----------------------------------------------------

    def _named_tool(self, event: JsonObject) -> str | None:
        """The declared tool a call's title or `_meta` names as a `bb-bridge` tool (or, for a generic call, whose
        name is the whole title)."""
        names = [event.get("title")]
        meta = event.get("_meta")
        if isinstance(meta, dict):
            names += [v.get("toolName") for v in meta.values() if isinstance(v, dict)]
        for name in names:
            if not isinstance(name, str):
                continue
            for pattern in (_SERVER_TOOL, _TOOL_SERVER):
                match = pattern.search(name)
                if match is not None and match.group("tool") in self.tools:
                    return match.group("tool")
        title = event.get("title")
        if event.get("kind") in (None, "other") and isinstance(title, str) and title.strip() in self.tools:
            return title.strip()
        return None

    def _declared(self, event: JsonObject) -> tuple[str, Any] | None:
        """The declared tool a call runs (claimed once, by name or by a relayed MCP call), else None."""
        if not self.tools:
            return None
        call_id = event["toolCallId"]
        if call_id in self.claimed:
            return self.claimed[call_id]
        name = self._named_tool(event)
        if name is not None:
            args = next((a for t, a in self.relayed if t == name), UNSET)
            self._claim(call_id, name, args)
            return self.claimed[call_id]
        exact = [(tool, args) for tool, args in self.relayed if _mcp_match(event, tool, args, alone=False)]
        loose = [(tool, args) for tool, args in self.relayed if _mcp_match(event, tool, args)]
        chosen = exact[0] if exact else loose[0] if len(loose) == 1 else None
        if chosen is None:
            return None
        self._claim(call_id, *chosen)
        return self.claimed[call_id]

    def _claim(self, call_id: str, tool: str, args: Any) -> None:
        self.claimed[call_id] = (tool, args)
        entry = next((e for e in self.relayed if e[0] == tool and (args is UNSET or e[1] == args)), None)
        if entry is not None:
            self.relayed.remove(entry)

    def mcp_called(self, tool: str, arguments: Any) -> None:
        """The bridge relayed a `tools/call` of a declared tool: claim the open ACP call it belongs to, else keep
        it for the `tool_call` still to come."""
        for call_id in self.calls:
            if self.claimed.get(call_id, (None, None)) == (tool, UNSET):  # named at its open, arguments unknown
                self.claimed[call_id] = (tool, arguments)
                return
        open_calls = [(cid, e) for cid, e in self.calls.items() if cid not in self.claimed]
        for call_id, event in open_calls:
            if self._named_tool(event) == tool or _mcp_match(event, tool, arguments, alone=False):
                self.claimed[call_id] = (tool, arguments)
                return
        lone = [cid for cid, e in open_calls if self._named_tool(e) is None and _mcp_match(e, tool, arguments)]
        if len(lone) == 1:
            self.claimed[lone[0]] = (tool, arguments)
            return
        self.relayed.append((tool, arguments))

    def _classify(self, event: JsonObject, status: g.ItemStatus | None = None, text: str | None = None) -> Classified:
        declared = self._declared(event)
        if declared is None:
            return classify(event)
        tool, args = declared
        return bb_tool(event, tool, args, self.tools.get(tool), status=status, output=text)

    # -- diagnostics --------------------------------------------------------

    def _raw(self, method: str, params: JsonObject) -> g.RawEvent:
        return g.RawEvent(jsonrpc="2.0", method=method, params={"threadId": self.thread_id, **params})

    def _fallback(self, update: JsonObject) -> g.NoTurnFallback:
        return g.NoTurnFallback(raw=self._raw(UPDATE_METHOD, {"update": update}), rawType=_raw_type(update))

    def _suppressed(self, update: JsonObject) -> list[g.Delta]:
        fallback = self._fallback(update)
        return [g.Unhandled(raw=fallback.raw, rawType=fallback.rawType, vouchedTurn=False, onlyIfNoTurn=True)]

    # -- updates ------------------------------------------------------------

    def update(self, update: JsonObject) -> list[g.Delta]:
        """The deltas of one `session/update`'s `update`."""
        kind = update.get("sessionUpdate")
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            return self._chunk(update, kind == "agent_message_chunk")
        if kind in ("tool_call", "tool_call_update"):
            event = tool_call_event(update)
            if event is None:
                return self._suppressed(update)
            return self._tool_call(event) if kind == "tool_call" else self._tool_call_update(event)
        if kind == "plan":
            return self._plan(update)
        if kind == "usage_update":
            used, size = non_negative_int(update.get("used")), non_negative_int(update.get("size"))
            if used is None or size is None:
                return self._suppressed(update)
            return [g.ContextWindow(used=used, size=size, estimated=False, attach="open")]
        if kind == "session_info_update":
            title = update.get("title")
            if not isinstance(title, str) or not title.strip():
                return self._suppressed(update)
            return [g.ThreadName(name=title)]
        if kind in NOISE_UPDATES:
            return self._suppressed(update)
        ordered = {"sessionUpdate": kind, **update} if isinstance(kind, str) else update
        return [
            g.Unhandled(raw=self._raw(UPDATE_METHOD, {"update": ordered}), rawType=_raw_type(update), vouchedTurn=True)
        ]

    def _chunk(self, update: JsonObject, message: bool) -> list[g.Delta]:
        text = text_of(update.get("content"))
        if text is None:
            return self._suppressed(update)
        fallback = self._fallback(update)
        if not message:
            return [g.ItemTextDelta(key=THOUGHT, channel="reasoningText", text=text, noTurnFallback=fallback)]
        delta = g.ItemTextDelta(key=ASSISTANT, channel="agentMessage", text=text, noTurnFallback=fallback)
        return [_close_thought(), delta]

    def _tool_call(self, event: JsonObject) -> list[g.Delta]:
        flush: list[g.Delta] = [_close_thought(), _close_assistant()]
        call_id = event["toolCallId"]
        if _terminal(event.get("status")):  # announced already settled: a close without an open
            return [*flush, self._close(event, _item_status(event["status"]), self._fallback(event))]
        self.calls[call_id] = event
        shaped = self._classify(event)
        item_open = g.ItemOpen(
            key=g.ItemKey(providerItemId=call_id),
            item=shaped.item,
            presentation=shaped.presentation,
            noTurnFallback=self._fallback(event),
        )
        return [*flush, item_open]

    def _tool_call_update(self, update: JsonObject) -> list[g.Delta]:
        call_id = update["toolCallId"]
        started = self.calls.get(call_id)
        merged = update if started is None else {**started, **_changed_fields(update)}
        if _terminal(merged.get("status")):
            self.calls.pop(call_id, None)
            return [self._close(merged, _item_status(merged["status"]), self._fallback(update))]
        self.calls[call_id] = merged
        progress = output_text(update)
        # commands and file changes settle with their output at the close; other items stream progress
        if progress and not isinstance(self._classify(merged).item, g.CommandShape | g.FileChangeShape):
            key = g.ItemKey(providerItemId=call_id)
            return [g.ItemProgress(key=key, message=progress, noTurnFallback=self._fallback(update))]
        return self._suppressed(update)

    def _close(self, event: JsonObject, status: g.ItemStatus, fallback: g.NoTurnFallback | None = None) -> g.ItemClose:
        """The terminal close of a (merged) call: full terminal shape plus the generic close fields."""
        text = output_text(event)
        shaped = self._classify(event, status, text)
        self.claimed.pop(event["toolCallId"], None)
        return g.ItemClose(
            key=g.ItemKey(providerItemId=event["toolCallId"]),
            status=status,
            resultText=UNSET if text is None else text,
            aggregatedOutput=UNSET if text is None else text,
            exitCode=(1 if status == "failed" else 0) if status in ("completed", "failed") else UNSET,
            item=shaped.item,
            presentation=shaped.presentation,
            noTurnFallback=UNSET if fallback is None else fallback,
        )

    def _plan(self, update: JsonObject) -> list[g.Delta]:
        """A plan update carries the whole list: each one is a settled `planSteps` snapshot, the latest wins."""
        entries = plan_entries(update)
        if entries is None:
            return self._suppressed(update)
        steps = [
            g.PlanStep(step=e["content"], status=STEP_STATUS[e["status"]])
            if "status" in e
            else g.PlanStep(step=e["content"])
            for e in entries
        ]
        return [
            g.ItemClose(
                key=PLAN_STEPS,
                status="completed",
                item=g.PlanStepsShape(steps=steps),
                presentation=p.plan_steps(steps),
                noTurnFallback=self._fallback(update),
            )
        ]

    # -- turns --------------------------------------------------------------

    def _flush(self, status: g.ItemStatus) -> list[g.Delta]:
        """Turn end: streams settle first, then every unsettled call, oldest first."""
        calls, self.calls = list(self.calls.values()), {}
        closes = [self._close(event, status) for event in calls]
        self.claimed.clear()
        self.relayed.clear()
        return [_close_thought(), _close_assistant(), *closes]

    def turn_started(self) -> list[g.Delta]:
        self.calls.clear()
        self.claimed.clear()
        self.relayed.clear()
        return [g.TurnOpen()]

    def turn_completed(self, stop_reason: str, usage: g.Usage | None = None) -> list[g.Delta]:
        status = turn_status(stop_reason)
        boundary = g.TurnBoundary(
            status=status,
            error=g.BoundaryError(message=f"Agent stopped the turn: {stop_reason}") if status == "failed" else UNSET,
            claimIfIdle=True,
        )
        return [*self._flush(status), *([] if usage is None else [usage]), boundary]

    def failed(self, message: str) -> list[g.Delta]:
        """A settling error: the failed turn abandons its unsettled calls."""
        self.calls.clear()
        self.claimed.clear()
        return [g.ProviderError(message="Provider error", detail=message, settlesTurn=True)]

    def compaction_started(self) -> list[g.Delta]:
        self.calls.clear()
        item = g.ItemOpen(key=COMPACTION, item=g.CompactionShape(), presentation=p.COMPACTION)
        return [g.TurnOpen(), item]

    def compaction_completed(self, status: TurnStatus, error: str | None = None) -> list[g.Delta]:
        """Only a completed compaction shrank the context; a failed or interrupted one reports no compaction."""
        compacted: list[g.Delta] = [g.ContextCompacted()] if status == "completed" else []
        failure = g.BoundaryError(message=error or "compaction failed") if status == "failed" else UNSET
        return [*self._flush(status), *compacted, g.TurnBoundary(status=status, error=failure)]

    def file_written(self, path: str, old_text: str | None, content: str) -> list[g.Delta]:
        """A client-side `fs/write_text_file` the bridge performed for the agent."""
        kind: Literal["add", "update"] = "add" if old_text is None else "update"
        entry = (
            g.FileChangeEntry(path=path, kind=kind, newText=content)
            if old_text is None
            else g.FileChangeEntry(path=path, kind=kind, oldText=old_text, newText=content)
        )
        params: JsonObject = {"path": path, "kind": kind, **({} if old_text is None else {"oldText": old_text})}
        raw = self._raw(FS_WRITE_METHOD, {**params, "content": content})
        close = g.ItemClose(
            key=FS_WRITE,
            status="completed",
            item=g.FileChangeShape(changes=[entry]),
            presentation=p.file_change(kind, [path]),
            noTurnFallback=g.NoTurnFallback(raw=raw, rawType=FS_WRITE_METHOD),
        )
        return [close]

    @staticmethod
    def warning(summary: str) -> list[g.Delta]:
        return [g.ProviderWarning(summary=summary, vouchedTurn=True)]


def prompt_usage(result: JsonObject) -> g.TokenBreakdown | None:
    """A `session/prompt` result's `usage` (`cachedReadTokens` and `thoughtTokens` are parts of input and output)."""
    usage = result.get("usage")
    if not isinstance(usage, dict):
        return None
    total, given, made = (non_negative_int(usage.get(k)) for k in ("totalTokens", "inputTokens", "outputTokens"))
    if total is None or given is None or made is None:
        return None
    return g.TokenBreakdown(
        totalTokens=total,
        inputTokens=given,
        cachedInputTokens=non_negative_int(usage.get("cachedReadTokens")) or 0,
        outputTokens=made,
        reasoningOutputTokens=non_negative_int(usage.get("thoughtTokens")) or 0,
    )


def _mcp_match(event: JsonObject, tool: str, args: Any, *, alone: bool = True) -> bool:
    """Whether a generic call may be the relayed MCP call `tool(args)`: its `rawInput` equals non-empty arguments,
    or (`alone`: the only open candidate) it has no arguments of its own and its title mentions MCP or the tool."""
    title = event.get("title")
    if event.get("kind") not in (None, "other") or _names_another(title, tool):
        return False
    raw = event.get("rawInput")
    if isinstance(args, dict) and args and raw == args:
        return True
    if not alone or raw not in (None, {}, args):
        return False
    return isinstance(title, str) and ("mcp" in title.lower() or tool in title)


def _names_another(title: Any, tool: str) -> bool:
    """Whether a title names a `bb-bridge` tool other than `tool`."""
    if not isinstance(title, str):
        return False
    match = _SERVER_TOOL.search(title) or _TOOL_SERVER.search(title)
    return match is not None and match.group("tool") != tool


def _changed_fields(update: JsonObject) -> JsonObject:
    """The fields of an update that override the started call (not its id, not its own kind marker)."""
    return {name: update[name] for name in TOOL_CALL_FIELDS[1:] if name in update}


def _raw_type(update: JsonObject) -> str:
    kind = update.get("sessionUpdate")
    return f"{UPDATE_METHOD}:{kind}" if isinstance(kind, str) and kind else UPDATE_METHOD


def _close_thought() -> g.ItemTextClose:
    return g.ItemTextClose(key=THOUGHT, channel="reasoningText")


def _close_assistant() -> g.ItemTextClose:
    return g.ItemTextClose(key=ASSISTANT, channel="agentMessage")
