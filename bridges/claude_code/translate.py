"""Claude Code SDK messages → `thread/delta` deltas (spec §4, §6.2).

Pure and synchronous: one `Translator` per CLI session, fed every SDK message the child writes (not the
control channel), in arrival order. `message()` returns one message's deltas — the bridge writes them as one
notification, never merged with or split from another message's.

The assembler owns turn and item ids; this module owns what only the dialect knows, chiefly the *turn
mirror* (§4.1): a copy of the assembler's current-turn machine, updated by every delta as it is produced, so
the translator knows whether a result settles an open turn or claims a queued input, which tool calls this
turn opened, and when a failed turn's late output must not open a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import UNSET

from bbridge.core import grammar as g
from bbridge.core import js
from bbridge.kit import DeltaEncoder
from bridges.claude_code import outcomes, plans, tool_items, visibility
from bridges.claude_code import presentation as p
from bridges.claude_code.outcomes import nonempty_string
from bridges.claude_code.tasks import Tasks

Json = Any
Message = dict[str, Any]
SDK_METHOD = "sdk/message"
PROVIDER_ERROR = "Provider error"
NO_RESPONSE = "No response requested."
SYNTHETIC_MODEL = "<synthetic>"
COMPACTION = g.ItemKey(channel="compaction")

# `thread/delta` params as the reference writes them (spec §8.1, §8.2): the Structs' member order but a
# presentation's `suppress`, which the reference writes right after the icon (the Struct after `title`/`detail`),
# and as `JSON.stringify` writes, so raw SDK messages keep the reference's number spellings and lone surrogates.
delta_params = DeltaEncoder(presentation=("label", "icon", "suppress", "title", "detail", "tint"), javascript=True)


def _count(value: Json) -> int | float:
    """A token count: finite and non-negative, else 0."""
    return value if js.is_number(value) and value >= 0 and value != float("inf") else 0


@dataclass(slots=True)
class _Rejection:
    """A hard rate-limit rejection, armed for one turn segment; the result reports it as the turn's error."""

    segment: int
    detail: str


class Translator:
    """One CLI session's translation state: the turn mirror, its per-turn latches and the dialect's state."""

    def __init__(
        self, thread_id: str, model: str | None = None, bb_tools: Mapping[str, g.Presentation | None] | None = None
    ) -> None:
        self.thread_id = thread_id
        self.bb_tools = dict(bb_tools or {})  # the client's tools and their declared presentations
        # the mirror of the assembler's current turn
        self.turn_open = False
        self.pending_inputs = 0
        self.segment = 0
        self.suppress_unaccepted = False
        # per-turn latches, reset whenever the mirror opens a turn
        self.context_tokens: int | float | None = None
        self.checkpoint: str | None = None
        self.rejection: _Rejection | None = None
        self.started: dict[str, tool_items.Classified] = {}
        # dialect state for the session's lifetime
        self.total = outcomes.breakdown(0, 0, 0, 0)
        self.hint = outcomes.context_hint(model)
        self.last_size: int | float | None = None
        self.reported_fallback: tuple[str, str, int] | None = None
        self.compaction: int | None = None
        self.tasks = Tasks()
        self.plan = plans.TaskPlan()
        self._out: list[g.Delta] = []

    # -- the mirror ------------------------------------------------------------

    @property
    def suppressed(self) -> bool:
        """A failed turn's late output may not open a new turn until an input is accepted (§4.1)."""
        return self.suppress_unaccepted and not self.turn_open and self.pending_inputs == 0

    def _open(self) -> None:
        if self.turn_open:
            return
        self.suppress_unaccepted = False
        self.turn_open = True
        self.segment += 1
        self.pending_inputs = 0
        self.context_tokens = None
        self.checkpoint = None
        self.rejection = None
        self.started = {}

    def _close(self) -> None:
        self.turn_open = False
        self.rejection = None
        self.started = {}

    def _mirror(self, delta: g.Delta) -> None:
        if isinstance(delta, g.InputAccepted):
            if not self.turn_open:
                self.pending_inputs += 1
        elif isinstance(delta, g.TurnOpen):
            self._open()
        elif isinstance(delta, g.TurnBoundary):
            if self.turn_open or (delta.claimIfIdle is True and self.pending_inputs > 0):
                self._open()
                self._close()
        elif isinstance(delta, g.ProviderError):
            if delta.threadScoped is True:
                return
            if not self.turn_open and self.pending_inputs > 0:
                self._open()
            if delta.settlesTurn is True and self.turn_open:
                self._close()
        elif isinstance(delta, g.SessionEnded) and (self.turn_open or self.pending_inputs > 0):
            self._open()
            self._close()

    def _push(self, *deltas: g.Delta) -> None:
        for delta in deltas:
            self._mirror(delta)
            self._out.append(delta)

    def _take(self) -> list[g.Delta]:
        out, self._out = self._out, []
        return out

    # -- deltas outside SDK messages (§4.11) -------------------------------------

    def input_accepted(self, client_request_id: str) -> list[g.Delta]:
        """An input handed to the child: it may start the next turn, and late output of a failed one may again."""
        self.suppress_unaccepted = False
        self._push(g.InputAccepted(clientRequestId=client_request_id))
        return self._take()

    def settlement(self) -> list[g.Delta]:
        """A dying session (interrupt, replacement): the open turn ends, unfinished background tasks stop."""
        if self.turn_open:
            self._push(g.SessionEnded())
        self._push(*self.tasks.drain())
        return self._take()

    def stream_error(self, text: str) -> list[g.Delta]:
        """The child's stream ended in error while a turn is open: the turn fails (§1.8)."""
        if not self.turn_open:
            return []
        self._push(g.TurnOpen(), g.ProviderError(message=PROVIDER_ERROR, detail=text, settlesTurn=True))
        return self._take()

    def model_changed(self, model: str | None) -> None:
        """A live model switch re-seeds the context-window hint (§3.5)."""
        self.hint = outcomes.context_hint(model)

    # -- SDK messages ------------------------------------------------------------

    def message(self, message: Message) -> list[g.Delta]:
        """The deltas of one SDK message, in order; an unknown message becomes an `unhandled` diagnostic."""
        parent = nonempty_string(message.get("parent_tool_use_id"))
        handler = _HANDLERS.get(message.get("type"))  # type: ignore[arg-type]
        if handler is not None:
            handler(self, message, parent)
        deltas = self._take()
        if deltas:
            return deltas
        raw_type, coverage = visibility.classify(message)
        if coverage != "unknown":
            return []
        raw = g.RawEvent(jsonrpc="2.0", method=SDK_METHOD, params={"message": message, "threadId": self.thread_id})
        return [_unhandled(raw, raw_type, parent)]

    def _fallback_raw(self, message: Message) -> g.RawEvent:
        """The raw event of a malformed message, `threadId` first (the reference re-parses it through its envelope)."""
        return g.RawEvent(jsonrpc="2.0", method=SDK_METHOD, params={"threadId": self.thread_id, "message": message})

    def _malformed(self, message: Message, parent: str | None) -> None:
        self._push(_unhandled(self._fallback_raw(message), visibility.classify(message)[0], parent))

    # -- stream_event (§4.4) -------------------------------------------------------

    def _stream_event(self, message: Message, parent: str | None) -> None:
        event = message.get("event")
        if not isinstance(event, dict) or self.suppressed:
            return
        index: Json = event.get("index")
        kind = event.get("type")
        if kind == "content_block_delta":
            block = event.get("delta")
            thinking_type, text_type = "thinking_delta", "text_delta"
        elif kind == "content_block_start":
            block = event.get("content_block")
            thinking_type, text_type = "thinking", "text"
        else:
            return
        if not isinstance(block, dict):
            return
        if block.get("type") == thinking_type and nonempty_string(block.get("thinking")) and js.is_number(index):
            key = _key(parent, channel=f"thinking-{js.number_text(index)}")
            self._push(g.TurnOpen(), g.ItemTextDelta(key=key, channel="reasoningText", text=block["thinking"]))
        elif block.get("type") == text_type and nonempty_string(block.get("text")):
            key = _key(parent, channel="assistant")
            self._push(g.TurnOpen(), g.ItemTextDelta(key=key, channel="agentMessage", text=block["text"]))

    # -- assistant (§4.5) ----------------------------------------------------------

    def _assistant(self, message: Message, parent: str | None) -> None:
        uuid = message.get("uuid")
        if "uuid" in message and not nonempty_string(uuid):
            self._malformed(message, parent)
            return
        if self.suppressed:
            return
        inner = message.get("message")
        inner = inner if isinstance(inner, dict) else {}
        content = _blocks(inner.get("content"))
        checkpoint = uuid if parent is None and isinstance(uuid, str) else None
        text = js.trim("\n".join(b["text"] for b in content if b["type"] == "text" and isinstance(b.get("text"), str)))
        if content and all(b["type"] == "fallback" for b in content) and self._fallback_block(content[0], checkpoint):
            return
        if _no_response(message, inner, text):
            if self.turn_open or self.pending_inputs > 0:
                self._push(g.TurnOpen())
                self._record_checkpoint(checkpoint)
                if not self.tasks.blocking:
                    self._push(self._boundary("completed"))
            return
        self._push(g.TurnOpen())
        self._record_checkpoint(checkpoint)
        usage = inner.get("usage")
        if isinstance(usage, dict):
            self.context_tokens = sum(
                _count(usage.get(n)) for n in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
            )
        for index, block in enumerate(content):
            if block["type"] == "thinking" and nonempty_string(block.get("thinking")):
                key = _key(parent, channel=f"thinking-{index}")
                self._push(g.ItemTextClose(key=key, channel="reasoningText", text=block["thinking"]))
        if text:
            self._push(g.ItemTextClose(key=_key(parent, channel="assistant"), channel="agentMessage", text=text))
        for block in content:
            if block["type"] == "tool_use" and isinstance(block.get("id"), str) and isinstance(block.get("name"), str):
                self._tool_use(block, parent)

    def _fallback_block(self, block: Json, checkpoint: str | None) -> bool:
        """A fallback-only message: the model switch, reported once per turn segment."""
        source = block.get("from") if isinstance(block.get("from"), dict) else {}
        target = block.get("to") if isinstance(block.get("to"), dict) else {}
        original, fallback = nonempty_string(source.get("model")), nonempty_string(target.get("model"))
        if original is None or fallback is None:
            return False
        self._push(g.TurnOpen())
        self._record_checkpoint(checkpoint)
        self._model_fallback(original, fallback, "provider", None)
        return True

    def _model_fallback(self, original: str, fallback: str, reason: Any, text: str | None) -> None:
        if self.reported_fallback == (original, fallback, self.segment):
            return
        self._push(
            g.ProviderModelFallback(
                originalModel=original,
                fallbackModel=fallback,
                reason=reason,
                message=text or f"Switched from {original} to {fallback}.",
            )
        )
        if self.segment > 0:
            self.reported_fallback = (original, fallback, self.segment)

    def _record_checkpoint(self, checkpoint: str | None) -> None:
        if checkpoint is not None:
            self.checkpoint = checkpoint

    def _boundary(self, status: g.TurnStatus) -> g.TurnBoundary:
        return g.TurnBoundary(status=status, providerCheckpointId=UNSET if self.checkpoint is None else self.checkpoint)

    def _tool_use(self, block: Message, parent: str | None) -> None:
        call_id, name, tool_input = block["id"], block["name"], block.get("input")
        shaped = tool_items.classify(name, call_id, tool_input, self.bb_tools)
        self.started[call_id] = shaped
        key = _key(parent, provider_item_id=call_id)
        self._push(g.ItemOpen(key=key, item=shaped.item, presentation=shaped.presentation))
        if name == "TodoWrite":
            steps = plans.todo_steps(tool_input)
            if steps is not None:
                self._push(plans.snapshot(steps, parent))

    # -- user: tool results (§4.6) ---------------------------------------------------

    def _user(self, message: Message, parent: str | None) -> None:
        inner = message.get("message")
        content = _blocks(inner.get("content") if isinstance(inner, dict) else None)
        results = [b for b in content if _tool_result(b)]
        if not results:
            return
        if not self.turn_open:
            self._malformed(message, parent)
            return
        envelope_output = message.get("tool_use_result") if len(results) == 1 else None
        for block in results:
            self._tool_result(block, parent, envelope_output)

    def _tool_result(self, block: Message, parent: str | None, envelope_output: Json) -> None:
        call_id = block["tool_use_id"]
        started = self.started.pop(call_id, None)
        shaped = started if started is not None else tool_items.fallback(block.get("tool_name"))
        item = shaped.item
        failed = block.get("is_error") is True
        text = tool_items.result_text(block.get("content"))
        command = block.get("tool_name") == "Bash" or isinstance(item, g.CommandShape)
        output = tool_items.command_output(block.get("content"), block.get("tool_use_result")) if command else text
        if isinstance(item, g.DelegationShape) and output is not None:
            summary = tool_items.stripped_summary(output)
            if summary:
                item = msgspec.structs.replace(item, summary=summary)
        close = g.ItemClose(
            key=_key(parent, provider_item_id=call_id),
            status="failed" if failed else "completed",
            item=item,
            presentation=shaped.presentation,
        )
        if isinstance(item, g.CommandShape):
            close.exitCode = 1 if failed else 0
            close.aggregatedOutput = UNSET if output is None else output
        elif not isinstance(item, g.FileReadShape | g.SearchShape | g.DelegationShape) and output is not None:
            close.resultText = output
        self._push(close)
        tool = item.tool if isinstance(item, g.ToolShape) else block.get("tool_name")
        if failed or tool not in plans.TASK_TOOLS:
            return
        tool_input = item.args if isinstance(item, g.ToolShape) and item.args is not UNSET else None
        if envelope_output is not None:
            result: Json = envelope_output
        elif block.get("tool_use_result") is not None:
            result = block["tool_use_result"]
        else:
            result = text
        if self.plan.fold(tool, tool_input, result):
            self._push(plans.snapshot(self.plan.steps(), parent))

    # -- result (§4.7) ---------------------------------------------------------------

    def _result(self, message: Message, parent: str | None) -> None:
        if not outcomes.valid_result(message):
            self._malformed(message, parent)
            return
        origin = message.get("origin")
        human = not isinstance(origin, dict) or origin.get("kind") == "human"
        if not self.turn_open and (self.pending_inputs == 0 or not human):
            return
        self._push(g.TurnOpen())
        window = outcomes.model_window(message.get("modelUsage"))
        size = window if window is not False else self.last_size if self.last_size is not None else self.hint
        if self.context_tokens is not None or size is not None:
            self._push(g.ContextWindow(used=self.context_tokens, size=size, estimated=True, attach="open"))
        if size is not None:
            self.last_size = size
        last = outcomes.last_usage(message.get("usage"))
        model_window = None if window is False else window
        if last is not None or model_window is not None:
            turn = last if last is not None else outcomes.breakdown(0, 0, 0, 0)
            self.total = g.TokenBreakdown(
                totalTokens=self.total.totalTokens + turn.totalTokens,
                inputTokens=self.total.inputTokens + turn.inputTokens,
                cachedInputTokens=self.total.cachedInputTokens + turn.cachedInputTokens,
                outputTokens=self.total.outputTokens + turn.outputTokens,
                reasoningOutputTokens=self.total.reasoningOutputTokens + turn.reasoningOutputTokens,
            )
            self._push(g.Usage(total=self.total, last=turn, modelContextWindow=model_window))
        subtype: str = message["subtype"]
        failed = message.get("is_error") is True or subtype.startswith("error")
        armed = self.rejection if self.rejection is not None and self.rejection.segment == self.segment else None
        if failed or armed is not None:
            info = outcomes.error_info(None, message.get("api_error_status"), subtype)
            detail = outcomes.failure_detail(message, subtype) if failed else armed.detail if armed else ""
            if armed is not None:
                info = g.ErrorInfo(
                    category="rate-limit",
                    providerCode=info.providerCode if info is not None and info.providerCode else "rate_limit_event",
                    httpStatusCode=info.httpStatusCode if info is not None else None,
                )
            self._push(
                g.ProviderError(message=PROVIDER_ERROR, detail=detail, errorInfo=UNSET if info is None else info)
            )
        self.rejection = None
        if not failed and self.tasks.blocking:
            return
        self.suppress_unaccepted = failed
        self._push(self._boundary("failed" if failed else "completed"))

    # -- system (§4.8, §4.9) -----------------------------------------------------------

    def _system(self, message: Message, parent: str | None) -> None:
        subtype = message.get("subtype")
        if subtype == "api_retry":
            self._api_retry(message)
        elif subtype == "status":
            self._status(message.get("status", None), "status" in message)
        elif subtype == "compact_boundary":
            fallback = g.NoTurnFallback(raw=self._fallback_raw(message), rawType="sdk/system:compact_boundary")
            self._push(g.ContextCompacted(noTurnFallback=fallback))
        elif subtype in ("model_fallback", "model_refusal_fallback"):
            original, fallback_model = (
                nonempty_string(message.get("original_model")),
                nonempty_string(message.get("fallback_model")),
            )
            text = message.get("content")
            if (
                original is not None
                and fallback_model is not None
                and ("content" not in message or isinstance(text, str))
            ):
                reason = "refusal" if subtype == "model_refusal_fallback" else "provider"
                self._model_fallback(original, fallback_model, reason, text)
        elif subtype == "model_refusal_no_fallback":
            text = message.get("content")
            if "content" not in message or isinstance(text, str):
                details = text or "The selected model refused the request and no fallback model was available."
                self._push(g.ProviderWarning(summary="Model refused the request", details=details, vouchedTurn=True))
        elif subtype == "permission_denied":
            self._permission_denied(message)
        elif subtype == "task_started":
            self._push(*self.tasks.started(message, self.suppressed))
        elif subtype == "task_progress":
            self._push(*self.tasks.progress(message))
        elif subtype == "task_updated":
            self._push(*self.tasks.updated(message))
        elif subtype == "task_notification":
            self._push(*self.tasks.notification(message))

    def _api_retry(self, m: Message) -> None:
        numbers: list[Json] = [m.get(n) for n in ("attempt", "max_retries", "retry_delay_ms")]
        status, code = m.get("error_status"), m.get("error")
        if not all(js.is_number(n) for n in numbers) or not (status is None or js.is_number(status)):
            return
        if code not in outcomes.API_RETRY_ERRORS:
            return
        attempt, most, delay = (js.number_text(n) for n in numbers)
        http = "" if status is None else f" HTTP {js.number_text(status)}"
        info = outcomes.error_info(code, status, None)
        error = g.ProviderError(
            message=PROVIDER_ERROR,
            detail=f"Claude Code API retry {attempt}/{most} after {delay}ms:{http} {code}",
            willRetry=True,
            errorInfo=UNSET if info is None else info,
        )
        if self.suppressed:
            error.threadScoped = True
            self._push(error)
        else:
            self._push(g.TurnOpen(), error)

    def _status(self, status: Json, present: bool) -> None:
        if present and status is not None and not isinstance(status, str):
            return
        if status == "compacting":
            if not self.suppressed:
                self._push(
                    g.TurnOpen(), g.ItemOpen(key=COMPACTION, item=g.CompactionShape(), presentation=p.COMPACTION)
                )
                self.compaction = self.segment
            return
        remembered, self.compaction = self.compaction, None
        if remembered is not None and remembered == self.segment and self.turn_open:
            self._push(
                g.ItemClose(key=COMPACTION, status="completed", item=g.CompactionShape(), presentation=p.COMPACTION)
            )

    def _permission_denied(self, m: Message) -> None:
        names = ("tool_name", "tool_use_id", "message")
        if not all(isinstance(m.get(n), str) for n in names):
            return
        if not all(isinstance(m[n], str) for n in ("decision_reason", "decision_reason_type") if n in m):
            return
        tool = m["tool_name"]
        line = m.get("decision_reason") or m["message"]
        if "decision_reason_type" in m:
            line = f"{line} ({m['decision_reason_type']})"
        started = self.started.get(m["tool_use_id"])
        description = None if started is None else tool_items.denied_input(started.item)
        details = line if description is None else f"{line}\n\n{tool} input:\n{description}"
        self._push(g.ProviderWarning(summary=f"{tool} was denied automatically", details=details, vouchedTurn=True))

    # -- rate limits and resets (§4.10) --------------------------------------------------

    def _rate_limit(self, message: Message, parent: str | None) -> None:
        info: Json = message.get("rate_limit_info")
        if not outcomes.valid_rate_limit(info):
            self._malformed(message, parent)
            return
        snapshot, status = outcomes.rate_limits(info)
        if not outcomes.hard_rejection(info):
            if status == "allowed" and self.turn_open and self.rejection and self.rejection.segment == self.segment:
                self.rejection = None
            self._push(snapshot)
            return
        if self.suppressed:
            self._push(snapshot)
            return
        self._push(g.TurnOpen(), snapshot)
        self.rejection = _Rejection(self.segment, outcomes.rejection_detail(info))

    def _conversation_reset(self, message: Message, parent: str | None) -> None:
        if not self.suppressed:
            self._push(g.TurnOpen(), g.ContextCleared())


_HANDLERS = {
    "stream_event": Translator._stream_event,
    "assistant": Translator._assistant,
    "user": Translator._user,
    "result": Translator._result,
    "system": Translator._system,
    "rate_limit_event": Translator._rate_limit,
    "conversation_reset": Translator._conversation_reset,
}


def _key(parent: str | None, *, provider_item_id: str | Any = UNSET, channel: str | Any = UNSET) -> g.ItemKey:
    return g.ItemKey(providerItemId=provider_item_id, channel=channel, parentRef=UNSET if parent is None else parent)


def _unhandled(raw: g.RawEvent, raw_type: str, parent: str | None) -> g.Unhandled:
    return g.Unhandled(raw=raw, rawType=raw_type, vouchedTurn=True, parentRef=UNSET if parent is None else parent)


def _blocks(content: Json) -> list[Message]:
    """Content blocks, when every element is an object with a string `type`; else none."""
    if isinstance(content, list) and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in content):
        return content
    return []


def _no_response(message: Message, inner: Message, text: str) -> bool:
    """The CLI's synthetic "No response requested." reply, which settles a turn without content."""
    usage = inner.get("usage")
    counts = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    return (
        inner.get("model") == SYNTHETIC_MODEL
        and inner.get("role") == "assistant"
        and inner.get("stop_reason") == "stop_sequence"
        and inner.get("stop_sequence") == ""
        and "error" not in message
        and message.get("isApiErrorMessage") is not True
        and "apiErrorStatus" not in message
        and isinstance(usage, dict)
        and all(usage.get(n) == 0 and js.is_number(usage.get(n)) for n in counts)
        and text == NO_RESPONSE
    )


def _tool_result(block: Message) -> bool:
    if block.get("type") != "tool_result" or not isinstance(block.get("tool_use_id"), str):
        return False
    if "is_error" in block and not isinstance(block["is_error"], bool):
        return False
    if "tool_name" in block and not isinstance(block["tool_name"], str):
        return False
    output = block.get("tool_use_result")
    if output is None or isinstance(output, str):
        return True
    return isinstance(output, dict) and all(isinstance(output[n], str) for n in ("stdout", "stderr") if n in output)
