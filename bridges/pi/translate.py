"""pi's session events → `thread/delta` batches (pi-bridge.md §4, §5), pure and synchronous.

One `Translator` serves every thread of the bridge process, as the reference's does: its memory is the
per-thread running usage total, the shapes of started tools (bounded) and the presentations the thread's
declared tools carry, stamped on their items (the reference drops them; protocol.md `DynamicTool` asks for them,
and the other bridges show them). Each call takes one input and
returns the deltas of one notification (an empty list sends nothing, [T2]). pi's `turn_start`/`turn_end`
are sub-turns: only `agent_start` opens a bb turn and only the final `agent_end` closes it (§4.15).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from msgspec import UNSET, UnsetType

from bbridge.core import grammar as g
from bbridge.core import js
from bbridge.kit.result_text import ResultText
from bridges.pi import catalog
from bridges.pi.visibility import UNKNOWN, visibility

SDK_METHOD = "sdk/message"
PROVIDER_ERROR = "Provider error"
SERIALIZATION_ERROR = "Provider raw event params were not JSON-serializable."
NO_OUTPUT = "(no output)"
SHAPE_CAP = 1024
SKIPPED = ("Compaction failed: Nothing to compact (session too small)", "Compaction failed: Already compacted")
COMPACTION = g.ItemKey(channel="compaction")
ASSISTANT = g.ItemKey(channel="assistant")
COMPACTION_REASONS = ("manual", "threshold", "overflow")
TRANSLATED = (
    "agent_start", "agent_end", "compaction_start", "compaction_end", "message_update",
    "tool_execution_start", "tool_execution_end", "tool_execution_update",
)  # fmt: skip

Json = dict[str, Any]


class _Invalid(Exception):
    """A handled event whose payload fails its schema ([T5])."""


def _str(value: Any) -> bool:
    return isinstance(value, str)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _require(ok: bool) -> None:
    if not ok:
        raise _Invalid


# -- raw events ([T6], [T7], [V1]) ------------------------------------------------------------


def _stub() -> g.RawEvent:
    return g.RawEvent(jsonrpc="2.0", method=SDK_METHOD, params={"serializationError": SERIALIZATION_ERROR})


def _fallback(thread_id: str, message: Any, *, serializable: bool = True) -> g.NoTurnFallback:
    """The no-turn fallback: params `threadId, message`; the stub when pi's object held `undefined` values."""
    envelope = {"jsonrpc": "2.0", "method": SDK_METHOD, "params": {"threadId": thread_id, "message": message}}
    kind, _ = visibility(envelope)
    raw = g.RawEvent(jsonrpc="2.0", method=SDK_METHOD, params=envelope["params"]) if serializable else _stub()
    return g.NoTurnFallback(raw=raw, rawType=kind)


def unhandled(thread_id: str, message: Any) -> g.Unhandled:
    """The visibility fallback's delta: the envelope as decoded, params `message, threadId`."""
    envelope = {"jsonrpc": "2.0", "method": SDK_METHOD, "params": {"message": message, "threadId": thread_id}}
    kind, _ = visibility(envelope)
    return g.Unhandled(
        raw=g.RawEvent(jsonrpc="2.0", method=SDK_METHOD, params=envelope["params"]), rawType=kind, vouchedTurn=True
    )


# -- result text ([T27]) ---------------------------------------------------------------------


# [T27] is the kit's extractor; pi's reference takes any `tool_name` member and labels with blank strings too.
result_text = ResultText(any_tool_name=True, blank_labels=True)


def _snapshot(value: Any) -> str | None:
    """A bash result's text, normalised: `(no output)` and empty text are no output ([T14])."""
    text = result_text(value)
    return None if not text or js.trim(text) == NO_OUTPUT else text


# -- shapes ([T13]) --------------------------------------------------------------------------


def classify(tool: str, args: Any) -> g.ItemShape:
    generic = g.ToolShape(tool=tool, args=args)  # absent args (UNSET) stay absent
    if tool == "bash":
        if isinstance(args, dict) and _str(args.get("command")) and args["command"] and _str(args.get("cwd", "")):
            return g.CommandShape(command=args["command"], cwd=args.get("cwd", ""))
        return generic
    if tool in ("edit", "write") and isinstance(args, dict):
        if not all(_str(args[name]) for name in ("oldText", "newText", "content") if name in args):
            return generic
        if not _str(args.get("path")):
            return generic
        new_text = args.get("newText", args.get("content"))
        entry = g.FileChangeEntry(
            path=args["path"],
            kind="update" if "oldText" in args else "add",
            oldText=args.get("oldText", UNSET),
            newText=new_text if new_text is not None else UNSET,
        )
        return g.FileChangeShape(changes=[entry])
    return generic


def _unseen(tool: str) -> g.ItemShape:
    if tool == "bash":
        return g.CommandShape(command="", cwd="")
    if tool in ("edit", "write"):
        return g.FileChangeShape(changes=[])
    return g.ToolShape(tool=tool)


# -- usage ([T20], [T22]) --------------------------------------------------------------------


def _count(usage: Json, name: str) -> float:
    value: Any = usage.get(name)
    return value if _count_ok(value) else 0  # as given: JSON keeps `100`, not `100.0`


def _count_ok(value: Any) -> bool:
    """A non-negative finite number."""
    return _number(value) and bool(value >= 0) and math.isfinite(value)


def breakdown(usage: Json) -> g.TokenBreakdown:
    inputs, outputs = _count(usage, "input"), _count(usage, "output")
    cached = _count(usage, "cacheRead") + _count(usage, "cacheWrite")
    total = _count(usage, "totalTokens")
    return g.TokenBreakdown(
        totalTokens=total if total > 0 else inputs + outputs + cached,
        inputTokens=inputs,
        cachedInputTokens=cached,
        outputTokens=outputs,
        reasoningOutputTokens=0,
    )


def _add(a: g.TokenBreakdown, b: g.TokenBreakdown) -> g.TokenBreakdown:
    return g.TokenBreakdown(
        totalTokens=a.totalTokens + b.totalTokens,
        inputTokens=a.inputTokens + b.inputTokens,
        cachedInputTokens=a.cachedInputTokens + b.cachedInputTokens,
        outputTokens=a.outputTokens + b.outputTokens,
        reasoningOutputTokens=a.reasoningOutputTokens + b.reasoningOutputTokens,
    )


ZERO = breakdown({})


# -- agent_end ([T17]–[T19]) -------------------------------------------------------------------


def _valid_message(message: Any) -> bool:
    if not isinstance(message, dict) or not _str(message.get("role")):
        return False
    content = message.get("content")
    if not _str(content) and not (
        isinstance(content, list) and all(isinstance(b, dict) and _str(b.get("type")) for b in content)
    ):
        return False
    if not all(_str(message[k]) for k in ("stopReason", "errorMessage", "provider", "model") if k in message):
        return False
    usage = message.get("usage", {})
    return isinstance(usage, dict) and all(
        _number(usage[k]) for k in ("input", "output", "cacheRead", "cacheWrite", "totalTokens") if k in usage
    )


def _error_text(message: Json) -> str | None:
    text: Any = message.get("errorMessage")
    if message.get("stopReason") == "error" and _str(text) and js.trim(text):
        return str(text)
    return None


class Translator:
    """Process-wide: per-thread usage totals and started-tool shapes ([T21], [T23])."""

    def __init__(self) -> None:
        self._totals: dict[str, g.TokenBreakdown] = {}
        self._shapes: OrderedDict[tuple[str, str], g.ItemShape] = OrderedDict()
        self._presentations: dict[str, dict[str, g.Presentation]] = {}  # thread → declared tool → its presentation

    # -- memory --

    def reset(self, thread_id: str, presentations: Mapping[str, g.Presentation] | None = None) -> None:
        """A session was constructed for the thread ([M10] step 4), declaring tools with these presentations."""
        self._totals[thread_id] = ZERO
        self._presentations[thread_id] = dict(presentations or {})
        self._forget(thread_id)

    def _forget(self, thread_id: str) -> None:
        for key in [k for k in self._shapes if k[0] == thread_id]:
            del self._shapes[key]

    def _remember(self, thread_id: str, call_id: str, shape: g.ItemShape) -> None:
        self._shapes[(thread_id, call_id)] = shape
        self._shapes.move_to_end((thread_id, call_id))
        while len(self._shapes) > SHAPE_CAP:
            self._shapes.popitem(last=False)

    def _presentation(self, thread_id: str, tool: str) -> g.Presentation | UnsetType:
        """The presentation the thread's declared tool `tool` carries (UNSET for any other tool)."""
        return self._presentations.get(thread_id, {}).get(tool, UNSET)

    # -- bridge-originated inputs ([T24]–[T26]) --

    def settled(self, thread_id: str, status: str, error: str | None = None) -> list[g.Delta]:
        self._forget(thread_id)
        failure = g.BoundaryError(message=error) if error is not None else UNSET
        return [g.TurnBoundary(status=status, error=failure, claimIfIdle=True)]  # type: ignore[arg-type]

    def context_window(self, usage: Any) -> list[g.Delta]:
        """pi's context usage `{tokens, contextWindow}` after `turn_end`/`compaction_end`; None → nothing."""
        if not isinstance(usage, dict):
            return []
        tokens: Any = usage.get("tokens")
        size: Any = usage.get("contextWindow")
        used = tokens if _number(tokens) and tokens >= 0 and math.isfinite(tokens) else None
        return [
            g.ContextWindow(
                used=used, size=size if _number(size) and size > 0 else None, estimated=True, attach="currentOrLast"
            )
        ]

    def error(self, thread_id: str, message: str | None) -> list[g.Delta]:
        self._forget(thread_id)
        detail = message if message else "unknown error"
        return [g.ProviderError(message=PROVIDER_ERROR, detail=detail, settlesTurn=True)]

    # -- events --

    def event(self, thread_id: str, event: Any, checkpoint: str | None = None) -> list[g.Delta]:
        """One pi event; `checkpoint` is the leaf id read at an `agent_end` ([T1])."""
        if isinstance(event, dict) and event.get("type") == "agent_settled":
            return []  # [T4]
        kind = event.get("type") if isinstance(event, dict) else None
        deltas: list[g.Delta] = []
        if kind in TRANSLATED:
            try:
                deltas = getattr(self, f"_{kind}")(thread_id, event, checkpoint)
            except _Invalid:
                fallback = _fallback(thread_id, event)
                return [g.Unhandled(raw=fallback.raw, rawType=fallback.rawType, vouchedTurn=True)]
        if deltas:
            return deltas
        _, coverage = visibility({"jsonrpc": "2.0", "method": SDK_METHOD, "params": {"message": event}})
        return [unhandled(thread_id, event)] if coverage == UNKNOWN else []

    def _agent_start(self, thread_id: str, event: Json, checkpoint: str | None) -> list[g.Delta]:
        return [g.TurnOpen()]

    def _message_update(self, thread_id: str, event: Json, checkpoint: str | None) -> list[g.Delta]:
        update = event.get("assistantMessageEvent")
        _require(isinstance(update, dict) and _str(update.get("type")))
        assert isinstance(update, dict)
        _require(all(_str(update[k]) for k in ("content", "delta") if k in update))
        _require("contentIndex" not in update or _number(update["contentIndex"]))
        sub: str = update["type"]
        index: Any = update.get("contentIndex")
        if sub == "text_delta" and update.get("delta"):
            return [g.ItemTextDelta(key=ASSISTANT, channel="agentMessage", text=update["delta"])]
        if sub == "thinking_delta" and update.get("delta"):
            _require(_number(index))
            return [g.ItemTextDelta(key=_thinking(index), channel="reasoningText", text=update["delta"])]
        if sub == "thinking_end" and update.get("content") and _number(index):
            return [g.ItemTextClose(key=_thinking(index), channel="reasoningText", text=update["content"])]
        return []

    def _tool_execution_start(self, thread_id: str, event: Json, checkpoint: str | None) -> list[g.Delta]:
        call_id, tool = _tool_ids(event)
        shape = classify(tool, event.get("args", UNSET))
        self._remember(thread_id, call_id, shape)
        parsed = _parsed(event, "args")
        return [
            g.ItemOpen(
                key=g.ItemKey(providerItemId=call_id),
                item=shape,
                presentation=self._presentation(thread_id, tool),
                noTurnFallback=_fallback(thread_id, parsed),
            )
        ]

    def _tool_execution_update(self, thread_id: str, event: Json, checkpoint: str | None) -> list[g.Delta]:
        call_id, tool = _tool_ids(event)
        partial = event.get("partialResult")
        key = g.ItemKey(providerItemId=call_id)
        parsed = _parsed(event, "args", "partialResult")
        if tool == "bash":
            text = _snapshot(partial)
            if text is None:
                return []
            empty_details = isinstance(partial, dict) and partial.get("details") == {}
            fallback = _fallback(thread_id, parsed, serializable=not empty_details)
            return [g.CommandOutputSnapshot(key=key, text=text, noTurnFallback=fallback)]
        message = js.trim(result_text(partial)) or f"{tool} progress update"
        return [g.ItemProgress(key=key, message=message, noTurnFallback=_fallback(thread_id, parsed))]

    def _tool_execution_end(self, thread_id: str, event: Json, checkpoint: str | None) -> list[g.Delta]:
        call_id, tool = _tool_ids(event)
        _require(isinstance(event.get("isError"), bool))
        result, failed = event.get("result"), event["isError"]
        shape = self._shapes.pop((thread_id, call_id), None) or _unseen(tool)
        output = _snapshot(result) if tool == "bash" else None
        serializable = not (isinstance(result, dict) and "details" not in result)
        return [
            g.ItemClose(
                key=g.ItemKey(providerItemId=call_id),
                status="failed" if failed else "completed",
                resultText=result_text(result),
                exitCode=1 if failed else 0,
                aggregatedOutput=output if output is not None else UNSET,
                item=shape,
                presentation=self._presentation(thread_id, tool),
                noTurnFallback=_fallback(thread_id, _parsed(event, "result", "isError"), serializable=serializable),
            )
        ]

    def _agent_end(self, thread_id: str, event: Json, checkpoint: str | None) -> list[g.Delta]:
        messages = event.get("messages")
        _require(isinstance(messages, list) and all(_valid_message(m) for m in messages))
        _require(isinstance(event.get("willRetry", False), bool))
        assert isinstance(messages, list)
        last = next(
            (m for m in reversed(messages) if m.get("role") == "assistant" and isinstance(m.get("content"), list)), None
        )
        error = _error_text(last) if last is not None else None
        if event.get("willRetry") is True:
            return [] if error is None else [g.ProviderError(message=PROVIDER_ERROR, detail=error, willRetry=True)]
        self._forget(thread_id)
        if error is not None:
            return [g.ProviderError(message=PROVIDER_ERROR, detail=error, settlesTurn=True)]
        deltas: list[g.Delta] = []
        if last is not None:
            text = js.trim(
                "\n".join(b["text"] for b in last["content"] if b.get("type") == "text" and _str(b.get("text")))
            )
            if text:
                deltas.append(g.ItemTextClose(key=ASSISTANT, channel="agentMessage", text=text))
            if isinstance(last.get("usage"), dict):
                used = breakdown(last["usage"])
                total = self._totals[thread_id] = _add(self._totals.get(thread_id, ZERO), used)
                window = catalog.context_window(last.get("provider"), last.get("model"))
                deltas.append(g.Usage(total=total, last=used, modelContextWindow=window))
        deltas.append(
            g.TurnBoundary(
                status="completed", providerCheckpointId=checkpoint if checkpoint else UNSET, claimIfIdle=True
            )
        )
        return deltas

    def _compaction_start(self, thread_id: str, event: Json, checkpoint: str | None) -> list[g.Delta]:
        _require(event.get("reason") in COMPACTION_REASONS)
        fallback = _fallback(thread_id, event)
        if event["reason"] == "manual":
            return [g.TurnOpen(), g.ItemOpen(key=COMPACTION, item=g.CompactionShape(), noTurnFallback=fallback)]
        return [g.ItemOpen(key=COMPACTION, item=g.CompactionShape(), attach="currentOrLast", noTurnFallback=fallback)]

    def _compaction_end(self, thread_id: str, event: Json, checkpoint: str | None) -> list[g.Delta]:
        _require(event.get("reason") in COMPACTION_REASONS and isinstance(event.get("aborted"), bool))
        _require("errorMessage" not in event or _str(event["errorMessage"]))
        aborted, error = event["aborted"], event.get("errorMessage")
        if event["reason"] != "manual":
            if not aborted and error is None:
                return [g.ContextCompacted(noTurnFallback=_fallback(thread_id, event))]
            summary = "Context compaction interrupted" if aborted else "Context compaction failed"
            return [g.ProviderError(message=summary, detail=error or "Automatic context compaction was interrupted")]
        self._forget(thread_id)
        if not aborted and error is not None and js.trim(error) in SKIPPED:
            warning = g.ProviderWarning(
                summary="Context compaction skipped", details=error, category="compaction-skipped", vouchedTurn=True
            )
            return [warning, g.TurnBoundary(status="completed")]
        deltas: list[g.Delta] = []
        if not aborted and error is None:
            deltas.append(g.ContextCompacted(noTurnFallback=_fallback(thread_id, event)))
        status = "interrupted" if aborted else "failed" if error else "completed"
        failure = g.BoundaryError(message=error) if error else UNSET
        deltas.append(g.TurnBoundary(status=status, error=failure))  # type: ignore[arg-type]
        return deltas


def _thinking(index: float) -> g.ItemKey:
    return g.ItemKey(channel=f"thinking-{js.number_text(index)}")


def _tool_ids(event: Json) -> tuple[str, str]:
    call_id, tool = event.get("toolCallId"), event.get("toolName")
    _require(_str(call_id) and _str(tool))
    return str(call_id), str(tool)


def _parsed(event: Json, *fields: str) -> Json:
    """The schema-parsed tool event: its known keys in the schema's order (absent ones stay absent)."""
    return {k: event[k] for k in ("type", "toolCallId", "toolName", *fields) if k in event}
