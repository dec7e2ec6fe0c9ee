"""App-server notifications → grammar deltas, byte for byte as the reference bridge (spec §3).

Pure and synchronous: one `Translator` per session construction holds the per-thread state (turn FIFOs of
client request ids, sub-agent links (`subagents`), retry memory, the rate-limit snapshot). What is emitted of
each batch (§3.2) is the session's `DeltaPath`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from msgspec import UNSET

from bbridge.core import grammar as g

from . import item_shapes, provider_errors, ratelimits, rawoutput
from . import presentation as p
from .fields import ShapeError, need, nullable_number, number, obj, optional_text, text
from .subagents import Links, SubAgent, attach, parent_of

GOAL_KIND = "provider-codex/goal"
PLAN_CHANNEL = "planSteps"
_TURN_STATUS = {"completed": "completed", "failed": "failed", "interrupted": "interrupted", "inProgress": "completed"}
_TEXT_CHANNELS = {
    "item/agentMessage/delta": "agentMessage",
    "item/reasoning/summaryTextDelta": "reasoningSummary",
    "item/reasoning/textDelta": "reasoningText",
    "item/plan/delta": "plan",
}
_OUTPUT_CHANNELS = {"item/commandExecution/outputDelta": "command", "item/fileChange/outputDelta": "fileChange"}
_GOAL_STATUS = ("active", "paused", "budgetLimited", "complete")
_PLAN_STATUS = {"pending": "pending", "inProgress": "active", "completed": "completed", "failed": "failed"}
_WARNINGS = {"deprecationNotice": "deprecation", "configWarning": "config"}
_USAGE_FIELDS = ("totalTokens", "inputTokens", "cachedInputTokens", "outputTokens", "reasoningOutputTokens")
NOISE = frozenset(
    {
        "item/autoApprovalReview/started",
        "item/autoApprovalReview/completed",
        "mcpServer/startupStatus/updated",
        "rawResponse/completed",
        "rawResponseItem/completed",
        "remoteControl/status/changed",
        "serverRequest/resolved",
        "skills/changed",
        "thread/settings/updated",
        "thread/status/changed",
        # codex 0.171 marks the thread read after every turn; the reference's table (0.149) predates it, and a
        # `provider/unhandled` per turn would be noise in every client's timeline
        "thread/readState/changed",
        "turn/moderationMetadata",
    }
)
HANDLED = frozenset(
    {
        "turn/started", "turn/completed", "thread/started", "thread/archived", "thread/unarchived",
        "thread/name/updated", "thread/compacted", "thread/goal/updated", "thread/goal/cleared",
        "item/started", "item/completed", "item/mcpToolCall/progress", "thread/tokenUsage/updated",
        "turn/plan/updated", "turn/diff/updated", "account/rateLimits/updated", "error",
        *_TEXT_CHANNELS, *_OUTPUT_CHANNELS, *_WARNINGS,
    }
)  # fmt: skip


def unhandled(method: str, message: dict[str, Any], turn: str | None = None) -> g.Unhandled:
    """The reference's catch-all: the notification as JSON-RPC, vouched only when a turn is named."""
    raw = g.RawEvent(jsonrpc="2.0", method=method)
    if isinstance(message.get("params"), dict):
        raw.params = message["params"]
    delta = g.Unhandled(raw=raw, rawType=method, vouchedTurn=turn is not None)
    if turn is not None:
        delta.providerTurnId = turn
    return delta


def codex_thread(params: dict[str, Any]) -> str | None:
    """The codex thread a notification belongs to: `threadId`, else `thread.id`."""
    thread = params.get("threadId")
    if isinstance(thread, str) and thread:
        return thread
    nested = params.get("thread")
    if isinstance(nested, dict) and isinstance(nested.get("id"), str):
        return str(nested["id"])
    return None


def _turn_error(turn: dict[str, Any]) -> str | None:
    """The failure text of a turn; an unknown error variant invalidates the notification."""
    if turn.get("error") is None:
        return None
    error = obj(turn["error"])
    provider_errors.error_info(error.get("codexErrorInfo"))
    return text(error, "message") or None


def _turn(params: dict[str, Any]) -> tuple[str, str, str | None]:
    text(params, "threadId")
    turn = obj(params.get("turn"))
    turn_id, status = text(turn, "id"), turn.get("status")
    need(status in _TURN_STATUS)
    return turn_id, str(status), _turn_error(turn)


def _breakdown(value: Any) -> g.TokenBreakdown:
    counts = obj(value)
    return g.TokenBreakdown(**{name: number(counts, name) for name in _USAGE_FIELDS})


class Translator:
    """Per-construction translation state; `translate` maps one app-server message to its deltas."""

    def __init__(self, bb_tools: Mapping[str, g.Presentation | None] | None = None) -> None:
        self.bb_tools: dict[str, g.Presentation | None] = dict(bb_tools or {})
        self.inputs: dict[str, deque[str]] = {}
        self.links = Links()
        self.errors = provider_errors.ErrorMapper()
        self.rate_limits: dict[str, Any] | None = None
        self.raw = rawoutput.RawOutputs()

    # -- state the session drives ------------------------------------------------------

    def queue_input(self, thread: str, client_request_id: str) -> None:
        """A `turn/start` about to be dispatched: its `turn.open` will carry `input.accepted`."""
        self.inputs.setdefault(thread, deque()).append(client_request_id)

    def unqueue_input(self, thread: str, client_request_id: str) -> bool:
        """A failed dispatch or a zero-work settlement takes its id back; False when a turn claimed it."""
        queued = self.inputs.get(thread)
        if not queued or client_request_id not in queued:
            return False
        queued.remove(client_request_id)
        if not queued:
            del self.inputs[thread]
        return True

    def seed_rate_limits(self, result: Any) -> None:
        """The handshake's `account/rateLimits/read` answer is the base later updates merge over."""
        snapshot = result.get("rateLimits") if isinstance(result, dict) else None
        try:
            self.rate_limits = ratelimits.merge(None, ratelimits.check(snapshot))
        except ShapeError:
            return

    # -- the pipeline (§3.1) -----------------------------------------------------------

    def translate(self, message: dict[str, Any]) -> list[g.Delta]:
        """The deltas for one notification as codex wrote it (`{"method", "params"?}`)."""
        method = message.get("method")
        if not isinstance(method, str):
            return []
        if "params" in message and not isinstance(message["params"], dict):
            return []
        params: dict[str, Any] = message.get("params") or {}
        thread = codex_thread(params)
        if method == "thread/closed" and isinstance(params.get("threadId"), str):
            closes = self._thread_closed(params["threadId"])
            if closes:
                return closes
        if method == "rawResponseItem/completed":
            return self.raw.raw_item(params)
        item = params.get("item")
        if method == "item/completed" and isinstance(item, dict) and item.get("type") == "subAgentActivity":
            return self.raw.reconcile(thread, self._sub_agent_activity(params, item, thread))
        result: list[g.Delta] = []
        for delta in self._core(method, message, params):
            self._link(delta, thread)
            result.append(delta)
            if isinstance(delta, g.TurnOpen) and thread is not None:
                queued = self.inputs.get(thread)
                if queued:
                    creq = queued.popleft()
                    if not queued:
                        del self.inputs[thread]
                    result.append(g.InputAccepted(clientRequestId=creq, providerTurnId=delta.providerTurnId))
            elif isinstance(delta, g.TurnBoundary):
                if thread is not None:
                    self.inputs.pop(thread, None)
                result.extend(self._complete_on_boundary(delta))
        return self.raw.reconcile(thread, result)

    def _core(self, method: str, message: dict[str, Any], params: dict[str, Any]) -> list[g.Delta]:
        if method not in HANDLED:
            if method in NOISE:
                return []
            if method == "item/commandExecution/terminalInteraction" and params.get("stdin") == "":
                return []
            return [unhandled(method, message)]
        try:
            return self._handled(method, message, params)
        except ShapeError:
            return [unhandled(method, message)]

    def _handled(self, method: str, message: dict[str, Any], params: dict[str, Any]) -> list[g.Delta]:
        """The table of §3.3, one method of `HANDLED`."""
        if method == "turn/started":
            turn_id, _, _ = _turn(params)
            return [g.TurnOpen(providerTurnId=turn_id)]
        if method == "turn/completed":
            return [self._turn_completed(params)]
        if method == "thread/started":
            started = obj(params.get("thread"))
            thread_id, preview = text(started, "id"), started.get("preview")
            need("preview" not in started or isinstance(preview, str))
            deltas: list[g.Delta] = [g.ThreadStarted(), g.ThreadIdentity(providerThreadId=thread_id)]
            if preview:
                deltas.append(g.ThreadName(name=preview))
            return deltas
        if method in ("thread/archived", "thread/unarchived"):
            text(params, "threadId")
            return []
        if method == "thread/name/updated":
            text(params, "threadId")
            name = optional_text(params, "threadName")
            return [g.ThreadName(name=name)] if name else []
        if method == "thread/compacted":
            text(params, "threadId")
            return [g.ContextCompacted(providerTurnId=text(params, "turnId"))]
        if method == "thread/goal/updated":
            return [self._goal(params)]
        if method == "thread/goal/cleared":
            text(params, "threadId")
            return [g.ExtensionState(extensionKind=GOAL_KIND, payload=None)]
        if method in ("item/started", "item/completed"):
            return self._item(method, message, params)
        if method in _TEXT_CHANNELS or method in _OUTPUT_CHANNELS:
            text(params, "threadId")
            turn, item_id, chunk = text(params, "turnId"), text(params, "itemId"), text(params, "delta")
            key = g.ItemKey(providerItemId=item_id)
            if method in _TEXT_CHANNELS:
                channel = _TEXT_CHANNELS[method]
                return [g.ItemTextDelta(key=key, channel=channel, text=chunk, providerTurnId=turn)]  # type: ignore[arg-type]
            output = _OUTPUT_CHANNELS[method]
            return [g.ItemOutputDelta(key=key, channel=output, text=chunk, providerTurnId=turn)]  # type: ignore[arg-type]
        if method == "item/mcpToolCall/progress":
            text(params, "threadId")
            turn, item_id = text(params, "turnId"), text(params, "itemId")
            note = optional_text(params, "message")
            progress = g.ItemProgress(key=g.ItemKey(providerItemId=item_id))
            if note:
                progress.message = note
            progress.providerTurnId = turn
            return [progress]
        if method == "thread/tokenUsage/updated":
            return self._usage(params)
        if method == "turn/plan/updated":
            return [self._plan(params)]
        if method == "turn/diff/updated":
            text(params, "threadId")
            turn = text(params, "turnId")
            return [g.TurnDiff(diff=text(params, "diff"), providerTurnId=turn)]
        if method == "account/rateLimits/updated":
            self.rate_limits = ratelimits.merge(self.rate_limits, ratelimits.check(params.get("rateLimits")))
            return [g.ProviderRateLimits(rateLimits=ratelimits.normalize(self.rate_limits))]
        if method == "error":
            return [self.errors.map(params)]
        if method in _WARNINGS:
            summary, details = text(params, "summary"), optional_text(params, "details")
            warning = g.ProviderWarning(category=_WARNINGS[method], summary=summary)  # type: ignore[arg-type]
            if details:
                warning.details = details
            return [warning]
        raise AssertionError(method)

    def _turn_completed(self, params: dict[str, Any]) -> g.TurnBoundary:
        turn_id, status, error = _turn(params)
        self.errors.forget(params["threadId"], turn_id)
        boundary = g.TurnBoundary(status=_TURN_STATUS[status], providerTurnId=turn_id)  # type: ignore[arg-type]
        if error:
            boundary.error = g.BoundaryError(message=error)
        if boundary.status in ("completed", "interrupted"):
            boundary.providerCheckpointId = turn_id
        return boundary

    def _goal(self, params: dict[str, Any]) -> g.ExtensionState:
        text(params, "threadId")
        goal = obj(params.get("goal"))
        status = goal.get("status")
        need(status in _GOAL_STATUS)
        payload = {
            "objective": text(goal, "objective"),
            "status": status,
            "tokenBudget": nullable_number(goal, "tokenBudget"),
            "tokensUsed": number(goal, "tokensUsed"),
            "timeUsedSeconds": number(goal, "timeUsedSeconds"),
        }
        return g.ExtensionState(extensionKind=GOAL_KIND, payload=payload)

    def _usage(self, params: dict[str, Any]) -> list[g.Delta]:
        text(params, "threadId")
        turn, usage = text(params, "turnId"), obj(params.get("tokenUsage"))
        size = nullable_number(usage, "modelContextWindow")
        total, last = _breakdown(usage.get("total")), _breakdown(usage.get("last"))
        return [
            g.Usage(total=total, last=last, modelContextWindow=size, providerTurnId=turn),
            g.ContextWindow(
                used=last.totalTokens, size=size, estimated=False, attach="currentOrLast", providerTurnId=turn
            ),
        ]

    def _plan(self, params: dict[str, Any]) -> g.ItemClose:
        text(params, "threadId")
        turn, plan = text(params, "turnId"), params.get("plan")
        explanation = optional_text(params, "explanation")
        need(isinstance(plan, list))
        steps: list[g.PlanStep] = []
        for raw in plan or []:
            entry = obj(raw)
            status = entry.get("status")
            need(status in _PLAN_STATUS)
            steps.append(g.PlanStep(step=text(entry, "step"), status=_PLAN_STATUS[str(status)]))  # type: ignore[arg-type]
        shape = g.PlanStepsShape(steps=steps)
        if explanation:
            shape.explanation = explanation
        active = next((step.step for step in steps if step.status == "active"), None)
        shown = p.make(
            "Updating plan", "Updated plan", "ListTodo", p.title(active if active is not None else explanation)
        )
        key = g.ItemKey(channel=PLAN_CHANNEL)
        return g.ItemClose(key=key, status="completed", item=shape, presentation=shown, providerTurnId=turn)

    def _item(self, method: str, message: dict[str, Any], params: dict[str, Any]) -> list[g.Delta]:
        text(params, "threadId")
        turn, item = text(params, "turnId"), obj(params.get("item"))
        item_type, item_id = text(item, "type"), text(item, "id")
        if item_type == "subAgentActivity":
            return []
        try:
            classified = item_shapes.classify(item, self.bb_tools)
        except ShapeError:
            return [unhandled(method, message, turn)]
        if classified is None:
            return []
        key = g.ItemKey(providerItemId=item_id)
        if method == "item/started":
            shown = classified.presentation
            return [g.ItemOpen(key=key, item=classified.item, presentation=shown, providerTurnId=turn)]  # type: ignore[arg-type]
        close = g.ItemClose(key=key, status=classified.status, item=classified.item)  # type: ignore[arg-type]
        if classified.declined:
            close.approvalStatus = "denied"
        close.presentation = classified.presentation
        close.providerTurnId = turn
        return [close]

    # -- sub-agents and delegation links (§3.10) -------------------------------------------

    def _link(self, delta: g.Delta, thread: str | None) -> None:
        """Attach the delegation call a delta belongs to, then learn links from delegation items."""
        links = self.links
        parent = parent_of(delta)
        turn = getattr(delta, "providerTurnId", UNSET)
        if parent is None and isinstance(turn, str):
            parent = links.turn_calls.get(turn)
        if parent is None and isinstance(delta, g.TurnOpen) and thread is not None:
            if thread in links.agent_calls:
                parent = links.agent_calls[thread]
                links.unqueue(parent)
            elif not self.inputs.get(thread):
                parent = links.pop_for(thread, turn if isinstance(turn, str) else "")
        if parent is None and thread is not None:
            parent = links.agent_calls.get(thread)
        if parent is not None:
            if isinstance(delta, g.TurnOpen) and isinstance(turn, str):
                links.turn_calls[turn] = parent
            attach(delta, parent)
        self._observe(delta, thread)

    def _observe(self, delta: g.Delta, thread: str | None) -> None:
        if not isinstance(delta, g.ItemOpen | g.ItemClose) or not isinstance(delta.key.providerItemId, str):
            return
        call, shape = delta.key.providerItemId, delta.item
        receivers: list[str]
        sender: str | None = None
        if isinstance(shape, g.DelegationShape):
            receivers = [shape.childRef]
        elif isinstance(shape, g.ToolShape) and shape.tool in ("spawnAgent", "resumeAgent"):
            args = shape.args
            if not isinstance(args, dict):
                return
            listed, named = args.get("receiverThreadIds", []), args.get("senderThreadId")
            if not (isinstance(listed, list) and all(isinstance(entry, str) for entry in listed)):
                return
            if named is not None and not isinstance(named, str):
                return
            receivers = [entry for entry in listed if entry]
            sender = named or None
        else:
            return
        turn = delta.providerTurnId if isinstance(delta.providerTurnId, str) else ""
        if thread is None:
            return
        if not receivers:
            self.links.queue(thread, call, turn)
        for receiver in receivers:
            if receiver in (thread, sender):
                self.links.queue(thread, call, turn)
            else:
                self.links.agent_calls[receiver] = call

    def _sub_agent_activity(self, params: dict[str, Any], item: dict[str, Any], thread: str | None) -> list[g.Delta]:
        parent_thread, parent_turn = params.get("threadId"), params.get("turnId")
        call, kind = item.get("id"), item.get("kind")
        agent_thread, agent_path = item.get("agentThreadId"), item.get("agentPath")
        valid = all(isinstance(value, str) for value in (parent_thread, parent_turn, call, agent_thread, agent_path))
        if not valid or kind not in ("started", "interacted", "interrupted"):
            return [
                unhandled("item/completed", {"params": params}, parent_turn if isinstance(parent_turn, str) else None)
            ]
        assert isinstance(call, str) and isinstance(parent_thread, str) and isinstance(parent_turn, str)
        assert isinstance(agent_thread, str) and isinstance(agent_path, str)
        tracked = self.links.agents.get(call)
        if kind == "started":
            if tracked is not None:
                return []
            agent = SubAgent(call, agent_thread, agent_path, parent_thread, parent_turn)
            self.links.agents[call] = agent
            opened = self._delegation_open(agent)
            self._link(opened, thread)
            agent.parent_ref = parent_of(opened)
            self.links.queue(parent_thread, call, parent_turn)
            return [opened]
        if kind == "interrupted":
            return self._complete(tracked, "interrupted") if tracked is not None else []
        if call in self.links.interactions or tracked is None or not tracked.terminal:
            self.links.interactions.add(call)
            return []
        self.links.interactions.add(call)
        was_open = tracked.open
        tracked.follow_ups += 1
        self._rearm(tracked)
        return [] if was_open else [self._delegation_open(tracked, keyed=True)]

    def _delegation_open(self, agent: SubAgent, keyed: bool = False) -> g.ItemOpen:
        key = agent.key() if keyed else g.ItemKey(providerItemId=agent.call)
        shown = p.subagent(agent.agent_path)
        return g.ItemOpen(key=key, item=agent.shape(), presentation=shown, providerTurnId=agent.parent_turn)

    def _rearm(self, agent: SubAgent) -> None:
        if agent.agent_thread != agent.parent_thread:
            self.links.agent_calls[agent.agent_thread] = agent.call
        self.links.queue(agent.parent_thread, agent.call, agent.parent_turn)

    def _complete(self, agent: SubAgent, status: str) -> list[g.Delta]:
        """Settle a sub-agent; its delegation closes only on the transition from open to settled."""
        was_open = agent.open
        already = agent.terminal
        agent.terminal = True
        links = self.links
        links.unqueue(agent.call)
        if links.agent_calls.get(agent.agent_thread) == agent.call:
            del links.agent_calls[agent.agent_thread]
        for turn in [turn for turn, call in links.turn_calls.items() if call == agent.call]:
            del links.turn_calls[turn]
        if already and agent.follow_ups > 0:
            agent.follow_ups -= 1
        if agent.follow_ups > 0:
            self._rearm(agent)
        if not was_open or agent.open:
            return []
        shown = p.subagent(agent.agent_path)
        close = g.ItemClose(key=agent.key(), status=status, item=agent.shape(), presentation=shown)  # type: ignore[arg-type]
        close.providerTurnId = agent.parent_turn
        return [close]

    def _complete_on_boundary(self, boundary: g.TurnBoundary) -> list[g.Delta]:
        turn = boundary.providerTurnId
        call = self.links.turn_calls.get(turn) if isinstance(turn, str) else None
        agent = self.links.agents.get(call) if call is not None else None
        return self._complete(agent, boundary.status) if agent is not None else []

    def child_exited(self, thread: str) -> list[g.Delta]:
        """The session child died (§3.13): its sub-agents fail and are forgotten, its raw output is dropped."""
        closes = self._thread_closed(thread)
        for call, agent in list(self.links.agents.items()):
            if agent.agent_thread == thread or agent.parent_thread == thread:
                del self.links.agents[call]
        return closes

    def _thread_closed(self, thread: str) -> list[g.Delta]:
        self.raw.drop(thread)
        closes: list[g.Delta] = []
        for agent in list(self.links.agents.values()):
            if agent.agent_thread == thread or agent.parent_thread == thread:
                closes.extend(self._complete(agent, "failed"))
        self.errors.forget_thread(thread)
        return closes
