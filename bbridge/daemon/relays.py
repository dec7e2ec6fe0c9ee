"""Bridge requests that need a client: `interaction/request` and `item/tool/call`, held as pending thread state.

A valid request (its schema checked, provider-native ids made bb ids; a tool call also against its thread's
declared tools, `daemon/declared_tools.py`) opens a pending request (`pending.py`). It is relayed, as a daemon →
client request, to one client: the thread's owner, else the last one connected. That client's answer resolves
it — unless another client answered first with `interaction/respond`. A client that goes away resolves
nothing. With no client connected for the provider's `interaction_timeout_s`, a `thread/stop` of its thread,
or its bridge's exit, the daemon's policy resolves it. The bridge gets exactly one answer, the resolution's.

A call of a tool the daemon hosts (`daemon/offered_tools.py`) is answered by its tool host instead, no client asked
(`hosted_call`); the host's `ask` is a pending approval opened, relayed and resolved as a bridge's is.

Traced (`seams/telemetry.py`, through the fanout): every tool call is a `bbridge.tool_call` span under its turn (its
kind, `hosted`, `client` or `mcp`, the decision and who made it, how it ended), and every wait on a person (a bridge's
approval or question, a hosted call's `ask`) a `bbridge.interaction` span, under its turn or its tool call.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Awaitable, Callable
from typing import Any, Final

import msgspec
import structlog
import trio
from msgspec import UNSET

from bbridge.daemon.agent_settings import AgentSettings
from bbridge.daemon.bridge import BridgeProcess
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.counters import Counters
from bbridge.daemon.declared_tools import Checker, Refusal, lookup
from bbridge.daemon.declared_tools import failed_result as failed_tool_result
from bbridge.daemon.fanout import ClientSink, Fanout
from bbridge.daemon.offered_tools import OfferedTools
from bbridge.daemon.pending import INTERACTION, TOOL_CALL, Interactions, Pending
from bbridge.daemon.threads import HostedRun, ThreadRegistry
from bbridge.seams.telemetry import NO_SPAN, Span
from bbridge.seams.tool_host import Approval, HostedCall
from bbridge.wire import client_api, protocol, rpc
from bbridge.wire.interactions import ToolCallResult

log = structlog.get_logger("bbridge.daemon.runtime")

DECISIONS: Final = ("allow_once", "allow_for_session", "deny")  # what a hosted call's approval offers


Warn = Callable[[BridgeProcess, str, str, str | None], None]
"""A `provider/warning` on a bridge's thread (bridge, thread id, summary, details): `delivery.Output`'s."""


class Relays:
    """Pending bridge requests: opened, relayed, resolved once. It owns the tasks that relay and expire them
    (started in the daemon's nursery, `start`), and reads the clients, the thread records and the bridges."""

    def __init__(
        self,
        providers: dict[str, ProviderConfig],
        bridges: dict[str, BridgeProcess],
        fanout: Fanout,
        registry: ThreadRegistry,
        interactions: Interactions,
        checker: Checker,
        offered: OfferedTools,
        counters: Counters,
        warn: Warn,
        agents: AgentSettings,
    ) -> None:
        self._providers = providers
        self._bridges = bridges
        self._fanout = fanout
        self._registry = registry
        self._interactions = interactions
        self._checker = checker
        self._offered = offered
        self._counters = counters
        self._warn = warn
        self._agents = agents  # answers the `skill` tool
        self._nursery: trio.Nursery | None = None
        self._budget_asks = 0

    def start(self, nursery: trio.Nursery) -> None:
        """Where the relays and timeouts of pending requests run from now on (the daemon's nursery)."""
        self._nursery = nursery

    async def on_bridge_request(self, bridge: BridgeProcess, request: rpc.Request) -> Any:
        """Open `item/tool/call` / `interaction/request` as pending, and answer the bridge with its resolution."""
        unsupported = rpc.RpcError(rpc.METHOD_NOT_FOUND, f'Unsupported provider request "{request.method}"')
        relay = RELAYED.get(request.method)
        if relay is None:
            raise unsupported
        raw = request.params if request.params is not None else b"null"
        try:
            protocol.decode_method_params(request.method, raw)
        except protocol.InvalidParams as exc:
            self._counters.rejected_bridge_requests += 1
            log.warning(
                "refused a malformed provider request",
                providerId=bridge.provider_id,
                method=request.method,
                issue=exc.issues[0],
            )
            raise unsupported from None
        params = msgspec.json.decode(raw)
        thread_id = params.get("threadId")
        if params.get("providerNativeIds") is True and isinstance(thread_id, str):
            bridge.bb_ids(thread_id, params)
        return await relay(self, bridge, params)

    async def _interaction(self, bridge: BridgeProcess, params: dict[str, Any]) -> Any:
        """An approval or a question: held pending until a client or the policy answers."""
        params["providerId"] = bridge.provider_id
        thread_id = params.get("threadId")
        pending = self._open(bridge.provider_id, INTERACTION, params, thread_id if isinstance(thread_id, str) else None)
        return await self._waited(pending, NO_SPAN)

    async def _tool_call(self, bridge: BridgeProcess, params: dict[str, Any]) -> Any:
        """Check a call against its thread's declared tools (`daemon/declared_tools.py`), then hold it pending.

        An undeclared tool or arguments that fail, exceed or outlast their checks are answered to the bridge at
        once as a failed call naming the tool, the path and the reason, so the model can correct itself; no
        client sees them. A call of one of the thread's hosted tools is answered by the tool host
        (`hosted_call`). A client answer that is no `ToolCallResult` reaches the bridge as a failed call.
        """
        thread_id = self._tool_thread(bridge, params)
        name: str = params["tool"]
        found = lookup(self._registry.tools_of(thread_id), name)
        refusal = found if isinstance(found, Refusal) else None
        if not isinstance(found, Refusal):
            params["tool"] = found.name  # `mcp__bb-bridge__<name>` reaches the client as the name it declared
            refusal = await self._checker.check(found, params.setdefault("arguments", {}))
        hosted = thread_id is not None and params["tool"] in self._registry.hosted_of(thread_id)
        if refusal is not None:
            self._counters.tool_calls_refused += 1
            log.info(
                "refused a tool call",
                providerId=bridge.provider_id,
                threadId=thread_id,
                tool=name,
                reason=refusal.message,
            )
            span = self._tool_span(bridge, thread_id, params, "hosted" if hosted else "client")
            _decided(span, "refused", "daemon")
            span.end(refusal.message)
            return refusal.result()
        if thread_id is not None and hosted:
            if self._agents.serves_skill(thread_id, params["tool"]):
                self._counters.hosted_calls += 1
                answered = self._agents.read_skill(thread_id, params["arguments"])
                span = self._tool_span(bridge, thread_id, params, "hosted")
                _decided(span, "allow", "daemon")
                _ended(span, answered)
                return answered
            return await self.hosted_call(bridge, thread_id, params)
        params["providerId"] = bridge.provider_id
        self._counters.tool_calls_relayed += 1
        span = self._tool_span(bridge, thread_id, params, "client")
        pending = self._open(bridge.provider_id, TOOL_CALL, params, thread_id)
        try:
            answer = await self._outcome(pending)
        except rpc.RpcError as exc:
            self._counters.tool_calls_failed += 1
            _decided(span, "relayed", str(pending.resolved_by))
            span.end(exc.message)
            raise
        except BaseException:
            span.end("cancelled")
            raise
        _decided(span, "relayed", str(pending.resolved_by))
        _ended(span, answer)
        try:
            msgspec.json.decode(answer, type=ToolCallResult)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            self._counters.tool_calls_failed += 1
            log.warning(
                "a client answered a tool call with an invalid tool result",
                providerId=bridge.provider_id,
                threadId=thread_id,
                tool=params["tool"],
                client=pending.resolved_by,
                error=str(exc),
            )
            return failed_tool_result(
                f'The client\'s answer to tool "{params["tool"]}" was not a valid tool result ({exc}); the call failed'
            )
        return answer

    async def hosted_call(self, bridge: BridgeProcess, thread_id: str, params: dict[str, Any]) -> dict[str, Any]:
        """Hand a checked call of a hosted tool to the tool host (no client is asked), in a cancel scope kept on
        the thread's record: a cancelled call answers the bridge as failed, saying why."""
        host = self._offered.host
        assert host is not None
        record = self._registry.records[thread_id]
        tool: str = params["tool"]
        span = self._tool_span(bridge, thread_id, params, "hosted")  # the host says `mcp` for an MCP server's
        call = HostedCall(
            thread_id=thread_id,
            provider_id=bridge.provider_id,
            turn_id=params.get("turnId"),
            call_id=params["callId"],
            tool=tool,
            arguments=params.get("arguments") or {},
            cwd=record.cwd,
            ask=functools.partial(self._ask, bridge, thread_id, params, span),
            options=copy.deepcopy(record.options),
            hidden=record.hidden is not None,
            span=span,
        )
        run = HostedRun()
        record.calls.add(run)
        self._counters.hosted_calls += 1
        try:
            with run.scope:
                result = await host.call(call)
        except trio.Cancelled:  # from outside: the bridge's connection closed (it exited), nobody takes an answer
            self._counters.hosted_calls_cancelled += 1
            log.info("cancelled a hosted tool call: its bridge went away", threadId=thread_id, tool=tool)
            span.end("cancelled: its bridge went away")
            raise
        except Exception as exc:  # a fault of the host: the model reads a failed call, the log has the traceback
            self._counters.hosted_calls_failed += 1
            log.exception("the tool host failed a call", threadId=thread_id, tool=tool)
            span.end(f"the tool host failed: {exc}")
            return failed_tool_result(f'Tool "{tool}" failed in the daemon\'s tool host: {exc}')
        finally:
            record.calls.discard(run)
        if run.scope.cancel_called:
            self._counters.hosted_calls_cancelled += 1
            log.info("cancelled a hosted tool call", threadId=thread_id, tool=tool, reason=run.reason)
            span.end(f"cancelled: {run.reason}")
            return failed_tool_result(f'Tool "{tool}" was cancelled: {run.reason}')
        _ended(span, result)
        try:
            answer = msgspec.convert(result, ToolCallResult)
        except msgspec.ValidationError as exc:
            self._counters.hosted_calls_failed += 1
            log.error("the tool host answered an invalid tool result", threadId=thread_id, tool=tool, error=str(exc))
            return failed_tool_result(f'Tool "{tool}" failed: the daemon\'s tool host answered no valid result ({exc})')
        if not answer.success:
            self._counters.hosted_calls_failed += 1
        return result

    async def _ask(
        self, bridge: BridgeProcess, thread_id: str, call: dict[str, Any], span: Span, details: dict[str, Any]
    ) -> Approval:
        """A hosted call's approval: a pending `interaction/request` like a bridge's (subject `tool_use`, the
        host's `details` beside the payload), relayed and resolved the same way; anything but an allow denies."""
        tool: str = call["tool"]
        subject = {
            "kind": "tool_use",
            "itemId": call["callId"],
            "tool": tool,
            "presentation": self._offered.presentation(tool),
        }
        params: dict[str, Any] = {
            **details,
            "threadId": thread_id,
            "providerThreadId": call.get("providerThreadId"),
            "turnId": call.get("turnId"),
            "payload": {
                "kind": "approval",
                "subject": subject,
                "reason": f'Tool "{tool}" is hosted by the daemon, whose policy asks before this call runs',
                "availableDecisions": list(DECISIONS),
            },
            "providerId": bridge.provider_id,
        }
        self._counters.hosted_asks += 1
        pending = self._open(bridge.provider_id, INTERACTION, params, thread_id)
        answer = await self._answer(pending, "the hosted tool call was cancelled", span)
        approval = _approval(answer, str(pending.resolved_by))
        if approval.decision != "deny":
            self._counters.hosted_asks_allowed += 1
        return approval

    async def ask_budget(
        self, provider_id: str, thread_id: str | None, method: str, reason: str, budget: dict[str, Any]
    ) -> Approval:
        """A budget's approval (`budgets.py`): pending like a hosted call's (subject `tool_use`, the request's method;
        the `BudgetRefusal` beside the payload), relayed and resolved the same way, but declined after the provider's
        `interaction_timeout_s` whether or not a client is connected: a client's request waits on it."""
        self._budget_asks += 1
        subject = {
            "kind": "tool_use",
            "itemId": f"budget-{self._budget_asks}",
            "tool": method,
            "presentation": {
                "label": {"pending": "Over budget", "completed": "Over budget"},
                "icon": {"glyph": "Gauge"},
                "detail": f"budget {budget.get('budget')}",
            },
        }
        params: dict[str, Any] = {
            "threadId": thread_id,
            "providerThreadId": self._registry.provider_threads.get(thread_id) if thread_id is not None else None,
            "turnId": None,
            "payload": {
                "kind": "approval",
                "subject": subject,
                "reason": reason,
                "availableDecisions": list(DECISIONS),
            },
            "providerId": provider_id,
            "budget": budget,
        }
        pending = self._open(provider_id, INTERACTION, params, thread_id, always_expires=True)
        return _approval(await self._answer(pending, "the budgeted request was cancelled"), str(pending.resolved_by))

    async def _answer(self, pending: Pending, cancelled: str, span: Span = NO_SPAN) -> Any:
        """A daemon-made approval's answer as JSON (a client's error answer declines; a cancelled wait leaves
        nothing pending); its wait traced under `span` (a hosted call's ask: its tool call)."""
        try:
            raw = await self._waited(pending, span)
        except rpc.RpcError:
            raw = msgspec.Raw(b"null")
        finally:
            self._by_policy(pending, cancelled, "daemon:call-cancelled")
        return msgspec.json.decode(raw)

    def _tool_span(self, bridge: BridgeProcess, thread_id: str | None, params: dict[str, Any], kind: str) -> Span:
        """A tool call's `bbridge.tool_call` span, under the thread's turn (`NO_SPAN` untraced)."""
        tracer = self._fanout.tracer
        if not tracer.enabled:
            return NO_SPAN
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": str(params.get("tool")),
            "gen_ai.tool.call.id": str(params.get("callId")),
            "bbridge.tool.kind": kind,
            "bbridge.provider_id": bridge.provider_id,
            **({"bbridge.thread_id": thread_id} if thread_id is not None else {}),
        }
        turn = params.get("turnId")
        return tracer.in_turn("bbridge.tool_call", thread_id, turn if isinstance(turn, str) else None, attributes)

    async def _waited(self, pending: Pending, parent: Span) -> msgspec.Raw:
        """A bridge's approval or question, or a hosted call's `ask`, answered: the wait a `bbridge.interaction`
        span, under the request's turn (or `parent`, the tool call that asks)."""
        tracer = self._fanout.tracer
        if not tracer.enabled:
            return await self._outcome(pending)
        attributes = {"bbridge.interaction.kind": pending.kind, "bbridge.request_id": pending.request_id}
        if parent is not NO_SPAN:
            span = tracer.start("bbridge.interaction", parent, attributes)
        else:
            turn = pending.params.get("turnId")
            turn = turn if isinstance(turn, str) else None
            span = tracer.in_turn("bbridge.interaction", pending.thread_id, turn, attributes)
        try:
            raw = await self._outcome(pending)
        except rpc.RpcError as exc:
            span.set("bbridge.interaction.resolved_by", str(pending.resolved_by))
            span.end(exc.message)
            raise
        except BaseException:
            span.end("cancelled")
            raise
        span.set("bbridge.interaction.resolved_by", str(pending.resolved_by))
        decision = _decoded(raw).get("decision")
        if isinstance(decision, str):
            span.set("bbridge.interaction.decision", decision)
        span.end()
        return raw

    def _tool_thread(self, bridge: BridgeProcess, params: dict[str, Any]) -> str | None:
        """The bb thread of a tool call on this bridge: its `threadId`, else the one with its `providerThreadId`."""
        thread_id = params.get("threadId")
        if not isinstance(thread_id, str):
            thread_id = self._registry.by_provider_thread(params.get("providerThreadId"), bridge.provider_id)
        if thread_id is None or not self._registry.on_provider(thread_id, bridge.provider_id):
            return None  # another provider's thread never lends its tools
        return thread_id

    # -- pending requests -----------------------------------------------------------------------------------

    def _open(
        self, provider_id: str, method: str, params: dict[str, Any], thread_id: str | None, always_expires: bool = False
    ) -> Pending:
        pending = self._interactions.add(method, provider_id, params, thread_id)
        self._counters.interactions_opened += 1
        assert self._nursery is not None
        client = self._answering_client(pending.thread_id)
        if client is not None:
            self._nursery.start_soon(self._relay, client, pending)
        config = self._providers.get(provider_id)
        timeout = config.interaction_timeout_s if config is not None else 300.0
        self._nursery.start_soon(self._expire, pending, timeout, always_expires)
        return pending

    def _answering_client(self, thread_id: str | None) -> ClientSink | None:
        return self._fanout.answering(self._registry.owner_of(thread_id) if thread_id is not None else None)

    async def _relay(self, client: ClientSink, pending: Pending) -> None:
        """Ask one client; its answer (a result or an error) resolves the request unless another came first. A
        resolution elsewhere withdraws the question (a late answer from this client is then ignored)."""
        async with trio.open_nursery() as nursery:

            async def withdrawn() -> None:
                await pending.done.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(withdrawn)
            try:
                raw = await client.relay(pending.method, pending.params)
            except rpc.ConnectionClosed:
                log.info("the client asked went away; the request stays pending", requestId=pending.request_id)
            except rpc.RpcError as exc:
                self._settle(pending, client, error=exc)
            else:
                self._settle(pending, client, result=raw)
            nursery.cancel_scope.cancel()

    def _settle(
        self,
        pending: Pending,
        client: ClientSink,
        *,
        result: msgspec.Raw | None = None,
        error: rpc.RpcError | None = None,
    ) -> None:
        if pending.request_id in self._interactions.open:
            self._interactions.resolve(pending.request_id, client.name, result, error, self._fanout.info.get(client))
        else:
            log.info("an answer came after the request was resolved", requestId=pending.request_id, by=client.name)

    async def _expire(self, pending: Pending, timeout: float, always: bool = False) -> None:
        """With no client connected for `timeout` seconds (`always`: after `timeout` seconds), the policy answers."""
        if always:
            with trio.move_on_after(timeout):
                await pending.done.wait()
            self._by_policy(pending, f"no client answered within {timeout:g}s", "daemon:timeout")
            return
        while not pending.done.is_set():
            changed = self._fanout.changed
            if self._fanout.clients:
                await _first(changed, pending.done)
                continue
            with trio.move_on_after(timeout) as waited:
                await _first(changed, pending.done)
            if waited.cancelled_caught and not self._fanout.clients:
                self._by_policy(pending, f"no client answered within {timeout:g}s", "daemon:timeout")

    async def _outcome(self, pending: Pending) -> msgspec.Raw:
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.result if pending.result is not None else msgspec.Raw(b"null")

    def _by_policy(self, pending: Pending, reason: str, by: str) -> None:
        if pending.request_id in self._interactions.open:
            self._counters.interactions_by_policy += 1
            log.info("resolved a pending request by policy", requestId=pending.request_id, kind=pending.kind, by=by)
            self._interactions.apply_policy(pending, reason, by)

    async def resolve_thread(self, thread_id: str, reason: str) -> None:
        """A `thread/stop`: the thread's pending requests are resolved before the stop goes to the bridge (two
        checkpoints: every answer's task, woken here, has written its answer before the caller writes the stop)."""
        waiting = self._registry.waiting(thread_id)
        for pending in waiting:
            self._by_policy(pending, reason, "daemon:thread-stop")
        if self._registry.cancel_calls(thread_id, reason) or waiting:
            await trio.lowlevel.checkpoint()
            await trio.lowlevel.checkpoint()

    def resolve_provider(self, provider_id: str, reason: str) -> None:
        """A bridge that exits: nobody can use an answer to its requests."""
        for pending in self._interactions.of_provider(provider_id):
            self._by_policy(pending, reason, "daemon:bridge-exit")

    # -- client answers ----------------------------------------------------------------------------------------

    def respond(self, client: ClientSink, answer: client_api.InteractionRespondParams) -> dict[str, Any]:
        """`interaction/respond`: answer a pending request; the first answer wins; its `warning` goes on the
        request's thread as a `provider/warning`."""
        if (answer.result is UNSET) == (answer.error is UNSET):
            raise rpc.RpcError(rpc.INVALID_PARAMS, "interaction/respond needs exactly one of result and error")
        result = None if answer.result is UNSET else answer.result
        error = None if answer.error is UNSET else rpc.RpcError(answer.error.code, answer.error.message)
        pending = self._interactions.resolve(
            answer.requestId, client.name, result, error, self._fanout.info.get(client)
        )
        bridge = self._bridges.get(pending.provider_id)
        if answer.warning is not UNSET and pending.thread_id is not None and bridge is not None:
            self._warn(bridge, pending.thread_id, answer.warning, None)
        return {"ok": True}


# The bridge requests the daemon serves: each is relayed to a client as a pending request.
RELAYED: dict[str, Callable[[Relays, BridgeProcess, dict[str, Any]], Awaitable[Any]]] = {
    TOOL_CALL: Relays._tool_call,
    INTERACTION: Relays._interaction,
}


def _decoded(answer: Any) -> dict[str, Any]:
    """An answer (a client's raw JSON, or the daemon's own dict) as a dict; {} when it is none."""
    if isinstance(answer, msgspec.Raw):
        try:
            answer = msgspec.json.decode(answer)
        except msgspec.DecodeError:
            return {}
    return answer if isinstance(answer, dict) else {}


def _decided(span: Span, decision: str, by: str) -> None:
    """A tool call's decision and who made it: the tool host's policy or a person (a hosted call, noted by the
    host), `refused` by the daemon (its schema check), `relayed` to a client and answered by it."""
    span.set("bbridge.tool.decision", decision)
    span.set("bbridge.tool.decided_by", by)


def _ended(span: Span, answer: Any) -> None:
    """A tool call's span ended with its answer: failed when the result is (`success` false)."""
    if span is NO_SPAN:
        return
    ok = _decoded(answer).get("success") is True
    span.set("bbridge.tool.success", ok)
    span.end(None if ok else "the tool call failed")


def _approval(answer: Any, by: str) -> Approval:
    """An approval's answer: an allow as given, anything else a deny."""
    decision = answer.get("decision") if isinstance(answer, dict) else None
    if decision == "allow_once" or decision == "allow_for_session":
        return Approval(decision, by)
    return Approval("deny", by)


async def _first(*events: trio.Event) -> None:
    """Return when any of the events is set."""
    async with trio.open_nursery() as nursery:
        for event in events:

            async def wait(event: trio.Event = event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait)
