"""The daemon (daemon.md): its parts, assembled, and the client requests it answers or forwards.

`Daemon` is the composition root. Each part owns its state and is handed the few others it uses:

* `fanout.Fanout`: the clients and the journal in front of them (`broadcast`, `publish`), and the tracer;
* `supervisor.Supervisor`: the bridge processes, their exits and watchdogs, and `release`;
* `delivery.Output`: bridge output to clients (notifications, text flushes, daemon-made events);
* `relays.Relays`: bridge requests that need a client, held as pending thread state;
* `status.Status`: `daemon/status`, read from all of them;
* `threads.ThreadRegistry`: every thread's record, shared by the others;
* `hidden.HiddenThreads`: the marks of the threads rooms run for themselves, kept and told to clients;
* `ledger.Ledger`: each turn's tokens, booked once (`usage/summary`); `budgets.Budgets`: the limits on them.

Client requests come here (`handle`): the daemon's own methods (`OWN`), bridge methods, forwarded with what each
method's rule (`methods.METHODS`) does before and after, given a `methods.RuleContext`, and the methods of the
rooms above the daemon that it was handed as `seams.services.Service`s.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import structlog
import trio
from msgspec import UNSET

from bbridge.daemon.agent_settings import AgentSettings
from bbridge.daemon.budgets import Budgets
from bbridge.daemon.config import ConfigReport, ProviderConfig
from bbridge.daemon.counters import CLIENT_PROTOCOL_VERSION, DAEMON_INFO, Counters, TurnDurations
from bbridge.daemon.declared_tools import CHECK_DEADLINE_S, MAX_ARGUMENT_BYTES, Checker, Declarations
from bbridge.daemon.delivery import Output
from bbridge.daemon.extensions import ExtensionChecker
from bbridge.daemon.fanout import ClientSink, Fanout
from bbridge.daemon.hidden import HiddenThreads
from bbridge.daemon.idle import Reaper
from bbridge.daemon.inputs import Inputs
from bbridge.daemon.journal import Journal, entries_json
from bbridge.daemon.ledger import Ledger
from bbridge.daemon.methods import DAEMON_MADE, FORWARDED, METHODS, Call, RuleContext, outgoing, viewed
from bbridge.daemon.mistakes import Mistakes
from bbridge.daemon.offered_tools import OfferedTools
from bbridge.daemon.pending import Interactions
from bbridge.daemon.relays import Relays
from bbridge.daemon.services import ROOM_METHODS, Services
from bbridge.daemon.status import SECTIONS, Status
from bbridge.daemon.supervisor import Spawning, Supervisor
from bbridge.daemon.threads import ThreadRegistry
from bbridge.daemon.tracker import Tracker
from bbridge.daemon.usage_config import UsageConfig
from bbridge.seams.agent_config import AgentConfigurer, AgentContext
from bbridge.seams.services import Service
from bbridge.seams.telemetry import NO_TRACER, Tracer
from bbridge.seams.tool_host import ToolHost
from bbridge.wire import client_api, errors, protocol, rpc, usage
from bbridge.wire.agent_config import AgentConfigurationParams
from bbridge.wire.redact import Pattern

__all__ = [
    "CLIENT_PROTOCOL_VERSION",
    "DAEMON_INFO",
    "FORWARDED",
    "OWN_METHODS",
    "ROOM_METHODS",
    "ClientSink",
    "Counters",
    "Daemon",
]

log = structlog.get_logger("bbridge.daemon.runtime")

DEFAULT_TIMEOUT_S = 30.0
_P = TypeVar("_P", bound=msgspec.Struct)


class Daemon:
    def __init__(
        self,
        providers: dict[str, ProviderConfig],
        *,
        journal: Journal | None = None,
        record_dir: Path | None = None,
        record_redactions: Sequence[Pattern] = (),
        token: str | None = None,
        text_delta_flush_ms: float = 100,
        entropy_prefix: str | None = None,
        request_timeout_s: float = DEFAULT_TIMEOUT_S,
        open_extensions: bool = False,
        config: ConfigReport | None = None,
        tool_check_deadline_s: float = CHECK_DEADLINE_S,
        max_tool_argument_bytes: int = MAX_ARGUMENT_BYTES,
        tool_host: ToolHost | None = None,
        agents: AgentConfigurer | None = None,
        services: Sequence[Service] = (),
        tracer: Tracer = NO_TRACER,
        spending: UsageConfig | None = None,
    ) -> None:
        self.providers = providers
        self.config = config or ConfigReport()  # the file and its refused entries, for `daemon/status`
        self.request_timeout_s = request_timeout_s
        self.token = token
        self.text_delta_flush_ms = text_delta_flush_ms
        self.journal = journal or Journal()
        self.counters = Counters()
        self.turn_durations = TurnDurations()  # per provider, for `daemon/status` and the listener's /metrics
        self.tracker = Tracker()
        self.mistakes = Mistakes()  # each thread's latest bridge mistakes, worded with its keys (daemon/status)
        self.registry = ThreadRegistry(tool_host)  # every thread's record
        self.offered = OfferedTools(tool_host)  # the tools the daemon hosts (None: none), offered to constructions
        self.declarations = Declarations()  # checks a construction's dynamicTools (the record keeps them)
        self.checker = Checker(deadline_s=tool_check_deadline_s, max_argument_bytes=max_tool_argument_bytes)
        self.tracer = tracer  # `[telemetry]`'s spans (`seams/telemetry.py`), reached by the parts through the fanout
        self.fanout = Fanout(self.journal, tracer)
        self.agents = AgentSettings(agents, self.fanout.publish)  # `[[agents]]` resolved before each turn
        self.interactions = Interactions(self.fanout.broadcast, self.registry, self.journal.directory)
        self.inputs = Inputs(self.fanout.broadcast, self.journal.directory)  # what clients asked of each thread
        self.hidden = HiddenThreads(self.registry, self.fanout.broadcast, self.journal.directory)
        self.spending = spending or UsageConfig()  # [pricing."MODEL"] and [[budgets]]
        self.ledger = Ledger(self.registry, self.inputs, self.journal.directory)  # each turn's tokens, booked once
        self.fanout.published = self.ledger.published  # a dead bridge's settled turns are booked too
        self.services = Services(services, {*OWN, *FORWARDED}, SECTIONS)  # rooms' client methods
        extensions = {
            pid: ExtensionChecker(pid, cfg.extension_kinds, allow_undeclared=open_extensions)
            for pid, cfg in providers.items()
        }
        bridges: dict[str, Any] = {}
        self.output = Output(
            self.fanout,
            self.registry,
            self.tracker,
            bridges,
            extensions,
            self.counters,
            self.turn_durations,
            self.mistakes,
            self.ledger,
        )
        self.relays = Relays(
            providers,
            bridges,
            self.fanout,
            self.registry,
            self.interactions,
            self.checker,
            self.offered,
            self.counters,
            self.output.deliver_warning,
            self.agents,
        )
        self.budgets = Budgets(
            self.spending, self.ledger, self.registry, self.relays.ask_budget, self.fanout.publish,
            self.journal.directory,
        )  # fmt: skip
        spawning = Spawning(
            record_dir, tuple(record_redactions), text_delta_flush_ms, entropy_prefix, self.agents.skill_roots
        )
        self.supervisor = Supervisor(
            providers,
            self.config,
            spawning,
            self.fanout,
            self.registry,
            self.tracker,
            bridges,
            self.output,
            self.relays,
            self.inputs,
        )
        self.view = Status(
            providers,
            self.config,
            self.supervisor,
            self.fanout,
            self.registry,
            self.tracker,
            self.interactions,
            self.offered,
            self.counters,
            self.turn_durations,
            self.mistakes,
            self.agents,
            self.hidden,
            self.services,
            self.budgets,
        )
        # idle threads released and resumed, idle bridges stopped, bridges started with the daemon
        self.reaper = Reaper(
            providers,
            self.supervisor,
            self.registry,
            self.tracker,
            self.interactions,
            self.relays.resolve_thread,
            self.counters,
        )
        self.rules = RuleContext(
            self.registry,
            self.declarations,
            self.offered,
            self.tracker,
            self.inputs,
            self.fanout,
            self.agents,
            self.hidden,
            self.relays.resolve_thread,
            self.supervisor.release,
            self.budgets,
        )
        self.shutdown_requested = trio.Event()
        self.stopped = trio.Event()

    # -- running -------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Owns the bridges; returns after `shutdown` has stopped them all."""
        async with trio.open_nursery() as nursery:
            self.supervisor.start(nursery)
            self.relays.start(nursery)
            nursery.start_soon(self.reaper.prestart)
            nursery.start_soon(self.reaper.run)
            if self.text_delta_flush_ms > 0:
                nursery.start_soon(self.output.flusher)
            task_status.started()
            await self.shutdown_requested.wait()
            await self.supervisor.stop_all()
            await self.checker.aclose()
            nursery.cancel_scope.cancel()
        self.ledger.close()  # the turns still open booked with what they reported
        self.journal.close()
        self.stopped.set()

    def request_shutdown(self) -> None:
        self.supervisor.close()
        self.shutdown_requested.set()

    def status(self, include_hidden: bool = False) -> dict[str, Any]:
        """`daemon/status` (also read by the listener's plain routes); hidden threads' rows only when asked."""
        return self.view.status(include_hidden)

    def usage_summary(self, params: dict[str, Any]) -> dict[str, Any]:
        """`usage/summary {groupBy?, since?, until?}`: the ledger's bookings summed (also read by `/metrics`)."""
        asked = _decoded("usage/summary", params, usage.UsageSummaryParams)
        since = None if asked.since is UNSET else asked.since
        until = None if asked.until is UNSET else asked.until
        groups = list(dict.fromkeys(asked.groupBy))  # a key named twice is one key
        return {"rows": self.ledger.summary(groups, since, until, self.spending.pricing)}

    async def _budgets_check(self, client: ClientSink, params: dict[str, Any]) -> dict[str, Any]:
        """`budgets/check {threadId?, providerId?, model?, runId?}`: the budgets as a `turn/start` with those keys
        meets them (a refusal is `BUDGET_EXCEEDED`); the `warn` budgets it went past."""
        asked = _decoded("budgets/check", params, usage.BudgetsCheckParams)
        thread, provider = _given(asked.threadId), _given(asked.providerId)
        signature = self.fanout.signature(client)
        client_key = signature.get("name") or signature["connection"]
        request = self.budgets.request(
            "budgets/check", thread, provider, _given(asked.model), client_key, _given(asked.runId)
        )
        warned = await self.budgets.gate(request)
        return {"allowed": True, "warned": msgspec.to_builtins(warned)}

    # -- client → daemon requests --------------------------------------------

    def add_client(self, client: ClientSink) -> None:
        self.fanout.add(client)

    def remove_client(self, client: ClientSink) -> None:
        """A client that goes away resolves nothing: its pending requests stay for the next one."""
        self.fanout.remove(client)
        self.registry.owner_left(client)

    async def handle(self, client: ClientSink, method: str, params: dict[str, Any]) -> Any:
        own = OWN.get(method)
        if own is not None:
            return await own(self, client, params)
        if method in FORWARDED:
            return await self._forward(client, method, params)
        return await self.services.handle(method, params)  # a room's, or -32601

    async def _hello(self, client: ClientSink, params: dict[str, Any]) -> dict[str, Any]:
        """`initialize`: what the client calls itself is kept (its answers are signed with it)."""
        hello = _decoded("initialize", params, client_api.DaemonInitializeParams)
        if hello.client is not msgspec.UNSET:
            self.fanout.named(client, hello.client)
        providers = [{"providerId": pid, **self.supervisor.provider_state(pid)} for pid in sorted(self.providers)]
        return {
            "daemon": DAEMON_INFO,
            "protocolVersion": CLIENT_PROTOCOL_VERSION,
            "grammarVersions": [3, 3],
            "providers": providers,
        }

    async def _shutdown(self, client: ClientSink, params: dict[str, Any]) -> dict[str, Any]:
        self.request_shutdown()
        await self.stopped.wait()
        return {}

    def _thread_events(self, params: dict[str, Any]) -> dict[str, Any]:
        """`thread/events {threadId, afterSeq?}`: the journal's events of the thread after `afterSeq`."""
        asked = _decoded("thread/events", params, client_api.ThreadEventsParams)
        replay = self.journal.after(asked.threadId, asked.afterSeq)
        result: dict[str, Any] = {"events": entries_json(replay.entries), "lastSeq": replay.last_seq}
        if replay.missing_before:
            result["missingThrough"] = replay.missing_before
        return result

    def _thread_inputs(self, params: dict[str, Any]) -> dict[str, Any]:
        """`thread/inputs {threadId, afterSentAt?}`: the turn inputs kept for the thread (`inputs.py`)."""
        asked = _decoded("thread/inputs", params, client_api.ThreadInputsParams)
        after = None if asked.afterSentAt is msgspec.UNSET else asked.afterSentAt
        return self.inputs.listing(asked.threadId, after)

    def _thread_pending(self, params: dict[str, Any]) -> dict[str, Any]:
        """`thread/pending {threadId?}`: the open requests (and a thread's recent resolutions)."""
        asked = _decoded("thread/pending", params, client_api.ThreadPendingParams)
        return self.interactions.listing(None if asked.threadId is msgspec.UNSET else asked.threadId)

    def _agent_configuration(self, params: dict[str, Any]) -> dict[str, Any]:
        """`agent/configuration {threadId} | {cwd, providerId, model?}`: the agent configuration that resolves for
        a thread (the context its latest construction or turn gave) or for a context given outright."""
        asked = _decoded("agent/configuration", params, AgentConfigurationParams)
        if asked.threadId is not UNSET:
            context = self.agents.context_of(asked.threadId)
            if context is None:
                provider_id = self.registry.provider_of(asked.threadId)
                if provider_id is None:
                    raise rpc.RpcError(
                        errors.UNKNOWN_THREAD,
                        f"agent/configuration: thread {asked.threadId!r} is not one this daemon constructed; "
                        "give {cwd, providerId, model?} instead",
                    )
                context = AgentContext(provider_id, self.registry.records[asked.threadId].cwd, asked.threadId)
        elif asked.providerId is UNSET or asked.cwd is UNSET:
            raise rpc.RpcError(rpc.INVALID_PARAMS, "agent/configuration needs threadId, or cwd and providerId")
        else:
            model = None if asked.model is UNSET else asked.model
            context = AgentContext(asked.providerId, asked.cwd, None, model)
        result: dict[str, Any] = msgspec.to_builtins(self.agents.explain(context))
        return result

    def _respond(self, client: ClientSink, params: dict[str, Any]) -> dict[str, Any]:
        """`interaction/respond {requestId, result | error, warning?}` (`Relays.respond`)."""
        answer = _decoded("interaction/respond", params, client_api.InteractionRespondParams)
        return self.relays.respond(client, answer)

    async def _forward(self, client: ClientSink, method: str, params: dict[str, Any]) -> Any:
        """A bridge method; one naming a thread is in flight on it until answered (no idle release meanwhile), and
        waits for a release or resume of it in flight; a turn on a thread released idle resumes it first
        (`idle.Reaper.ready`)."""
        thread_id = params.get("threadId")
        if not isinstance(thread_id, str):
            return await self._send(client, method, params)
        with self.reaper.in_flight(thread_id):
            await self.reaper.ready(thread_id, method, functools.partial(self._send, client, "thread/resume"))
            return await self._send(client, method, params)

    async def _send(self, client: ClientSink, method: str, params: dict[str, Any]) -> Any:
        """A bridge method, with what its rule (`methods.METHODS`) does before and after."""
        rule, ctx = METHODS[method], self.rules
        call = Call(client, method, params, viewed(method, params))
        provider_id = None if call.view.providerId is UNSET else call.view.providerId
        if provider_id is None and call.thread_id is not None:
            provider_id = self.registry.provider_of(call.thread_id)
        if provider_id is None:
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"{method} needs providerId (string)")
        call.provider_id = provider_id
        await rule.prepare(ctx, call)
        bridge = call.bridge = await self.supervisor.bridge(provider_id)
        refusal = protocol.method_allowed(method, bridge.capabilities)
        if refusal is not None:
            raise rpc.RpcError(errors.NOT_ADVERTISED, f"Provider {provider_id!r} refused {method}: {refusal}")
        if call.thread_id is not None:
            known = self.registry.provider_threads.get(call.thread_id)
            if known is not None and not rule.constructs and call.view.providerThreadId is UNSET:
                call.provider_thread_id = known
            turn = rule.turn_of(call.view)
            if turn is not None:
                call.provider_turn_id = bridge.provider_turn(call.thread_id, turn)
            await rule.before(ctx, call)

        def answered(raw: msgspec.Raw) -> None:
            if call.thread_id is not None:
                rule.after_result(ctx, call, raw)

        timeout = max(self.request_timeout_s, rule.min_timeout_s)
        sent = outgoing(call, rule.keeps_provider_id, rule.turn_field)
        try:
            raw = await bridge.request(method, sent, timeout, on_result=answered)
        except rpc.RpcError as exc:
            instead = rule.after_error(ctx, call, exc)
            if instead is not None:
                return instead
            if exc.code in DAEMON_MADE:
                raise
            raise bridge.with_env_advice(exc) from None  # "set BB_X …": how, through bbridge
        return msgspec.Raw(raw)


def _given(value: str | msgspec.UnsetType) -> str | None:
    return None if isinstance(value, msgspec.UnsetType) else value


def _decoded(method: str, params: dict[str, Any], kind: type[_P]) -> _P:
    """A daemon method's params as their `client_api` type, or the client's error naming what is wrong."""
    try:  # through JSON, not `convert`: a `msgspec.Raw` field (an answer's `result`) keeps the bytes as sent
        return msgspec.json.decode(msgspec.json.encode(params), type=kind)
    except msgspec.ValidationError as exc:
        raise rpc.RpcError(rpc.INVALID_PARAMS, f"{method}: {exc}") from None


# The methods the daemon answers itself; with FORWARDED, what `openrpc.json` describes.
OWN: dict[str, Callable[[Daemon, ClientSink, dict[str, Any]], Awaitable[Any]]] = {
    "initialize": Daemon._hello,
    "daemon/status": lambda daemon, client, params: _now(
        daemon.status(_decoded("daemon/status", params, client_api.DaemonStatusParams).includeHidden)
    ),
    "thread/events": lambda daemon, client, params: _now(daemon._thread_events(params)),
    "thread/inputs": lambda daemon, client, params: _now(daemon._thread_inputs(params)),
    "thread/pending": lambda daemon, client, params: _now(daemon._thread_pending(params)),
    "interaction/respond": lambda daemon, client, params: _now(daemon._respond(client, params)),
    "agent/configuration": lambda daemon, client, params: _now(daemon._agent_configuration(params)),
    "usage/summary": lambda daemon, client, params: _now(daemon.usage_summary(params)),
    "budgets/check": Daemon._budgets_check,
    "shutdown": Daemon._shutdown,
}
OWN_METHODS = tuple(OWN)


async def _now(result: Any) -> Any:
    """A synchronous method's answer, as the table's awaitable."""
    return result
