"""The daemon's client API as an OpenRPC 1.2.6 document (`openrpc.json`, written by `bbridge schema`).

Generated from the types the daemon decodes with: its own methods (`bbridge.wire.client_api`), the methods a room
above it serves (`bbridge.wire.perspectives`; the daemon answers `-32601` saying what to configure without one),
and the bridge methods it forwards (`bbridge.wire.protocol.RUNTIME_REQUESTS` but `initialize`, each with the
`providerId` that picks the bridge). A method with several result types (a tuple) answers any of them (`anyOf`). Params are by name (one content descriptor per member of the params object). What
OpenRPC has no place for is in extensions: `x-notifications` (daemon → client notifications) and
`x-client-requests` (daemon → client requests a client answers: relayed bridge requests).

A constrained string the client mints itself is a named component (`ClientRequestId`, with its pattern and what
it is for), not a pattern repeated inline, so a client's generated types can name it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from bbridge.core.grammar import ThreadDeltaParams
from bbridge.core.scalars import ClientRequestId
from bbridge.wire import agent_config, client_api, errors, interactions, perspectives, protocol, usage
from bbridge.wire.schema import Schema, components, ecma_patterns

OPENRPC_VERSION = "1.2.6"
REF = "#/components/schemas/"
FORWARDED = tuple(m for m in protocol.RUNTIME_REQUESTS if m != "initialize")

DAEMON_METHODS: dict[str, tuple[Any, Any, str]] = {
    "initialize": (client_api.DaemonInitializeParams, client_api.DaemonInitializeResult, "The first request: the token (on a socket with a token file) and the client's protocol version."),
    "daemon/status": (client_api.DaemonStatusParams, client_api.DaemonStatus, "The daemon, its providers, a live view of every thread (hidden ones with `includeHidden`), counters, configuration, journal, and each room's report."),
    "thread/events": (client_api.ThreadEventsParams, client_api.ThreadEventsResult, "A thread's journaled events after `afterSeq` (a reconnect's replay)."),
    "thread/pending": (client_api.ThreadPendingParams, client_api.ThreadPendingResult, "The pending approvals, questions and tool calls (one thread's, or all) and a thread's recent resolutions."),
    "thread/inputs": (client_api.ThreadInputsParams, client_api.ThreadInputsResult, "The turn inputs (`turn/start`, `turn/steer`) a thread's bridge accepted, oldest first, each with its `clientRequestId` (the `turn/input/accepted` event names it), its `input` as sent and who sent it: the canonical events keep no prompt text."),
    "interaction/respond": (client_api.InteractionRespondParams, client_api.InteractionRespondResult, "Answer a pending request; the first answer wins."),
    "agent/configuration": (agent_config.AgentConfigurationParams, agent_config.AgentConfiguration, "The agent configuration (`[[agents]]` of bbridge.toml) that resolves for a thread (the context its latest construction or turn gave), or for `{cwd, providerId, model?}`: each contribution applied or not and why, the composed instructions, the hosted-tool selection, the skills and the `BB_*` variables."),
    "usage/summary": (usage.UsageSummaryParams, usage.UsageSummaryResult, "The usage ledger: each turn's tokens, booked once, summed by the keys of `groupBy` (provider, model, thread, client, day, run) over the turns booked in [`since`, `until`) (seconds since the epoch), with `usd` where `[pricing.\"MODEL\"]` prices a model."),
    "budgets/check": (usage.BudgetsCheckParams, usage.BudgetsCheckResult, "The `[[budgets]]` as a `turn/start` with these keys meets them (a Perspectives run asks before it launches and between its phases): refused with -32023 (`BUDGET_EXCEEDED`, `data` a BudgetRefusal) by a `deny` budget or a declined `ask`; the `warn` budgets past their limit in `warned`."),
    "shutdown": (client_api.Empty, client_api.Empty, "Settle and stop every bridge, then answer."),
    "ai/complete": (perspectives.AiCompleteParams, (perspectives.AiCompleteOk, perspectives.AiCompleteError), "Served by a Perspectives room ([perspectives] in bbridge.toml): one helper inference on a hidden thread, its answer a JSON value valid against `outputSchema` (`ok: true`), or `ok: false` with a code a caller can act on."),
    "perspectives/runs": (perspectives.PerspectivesRunsParams, perspectives.PerspectivesRunsResult, "Served by a Perspectives room ([perspectives] in bbridge.toml): its runs (those called from `threadId`), each with its phase, outcome and hidden members."),
}  # fmt: skip

NOTIFICATION_SUMMARIES: dict[str, str] = {
    "thread/events": "A bridge notification's events for one thread, `seq` contiguous from 1.",
    "bridge/status": "A bridge process changed state.",
    "thread/identity": "A bridge reported a thread's provider identity.",
    "session/replaced": "A bridge replaced a thread's provider session.",
    "provider/recovery": "A bridge recovered a provider session.",
    "interaction/opened": "A bridge request is pending (see thread/pending).",
    "interaction/resolved": "A pending request was resolved, by a client or the daemon's policy.",
    "thread/input": "A turn input its bridge accepted was kept (see thread/inputs).",
    "thread/hidden": "A hidden thread (a room's own) is being constructed: lists leave it out (daemon/status includeHidden).",
}
# each notification's params type (the table the clients decode with) and summary, in the table's order
NOTIFICATIONS: dict[str, tuple[Any, str]] = {
    name: (kind, NOTIFICATION_SUMMARIES[name]) for name, kind in client_api.NOTIFICATION_PARAMS.items()
}

# Constructions: their `options` may carry `tools` (the daemon's own key, taken out before the bridge sees them).
CONSTRUCTIONS = ("thread/start", "thread/resume", "thread/fork")

# Forwarded methods whose answer the daemon may make itself: the result types it answers with.
DAEMON_RESULTS: dict[str, tuple[Any, ...]] = {"thread/stop": (client_api.ThreadStopAnswer,)}

CLIENT_REQUESTS: dict[str, tuple[Any, Any, str]] = {
    "interaction/request": (client_api.RelayedInteraction, Any, "An approval or question relayed to this client; its answer is this client's response."),
    "item/tool/call": (client_api.RelayedToolCall, interactions.ToolCallResult, "A client tool call relayed to this client."),
}  # fmt: skip

NAMED_STRINGS: dict[str, tuple[Any, str]] = {
    "ClientRequestId": (ClientRequestId, "The client's id of one turn input (`turn/start`, `turn/steer`), echoed by the `turn/input/accepted` event that accepts it: `creq_` and 10 characters of `23456789abcdefghijkmnpqrstuvwxyz` (no 0, 1, l or o); anything else is refused `-32602 Invalid params`. The bbridge clients mint one when it is left out."),
}  # fmt: skip

ERRORS = [
    {"code": value, "message": name}
    for name, value in sorted(vars(errors).items(), key=lambda item: -item[1] if isinstance(item[1], int) else 0)
    if name.isupper() and isinstance(value, int)
]


def _rewrite_refs(node: Any, mapping: bool = False) -> Any:
    """`$ref`s, and the values of a discriminator's `mapping`, from `#/$defs/` to the components."""
    if isinstance(node, dict):
        return {
            k: (
                v.replace("#/$defs/", REF)
                if (k == "$ref" or mapping) and isinstance(v, str)
                else _rewrite_refs(v, k == "mapping")
            )
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_rewrite_refs(item) for item in node]
    return node


def _name_strings(node: Any, named: dict[str, Schema]) -> Any:
    """Every inline schema equal to a named string's becomes a `$ref` to its component."""
    if isinstance(node, dict):
        for name, schema in named.items():
            if node == schema:
                return {"$ref": REF + name}
        return {key: _name_strings(value, named) for key, value in node.items()}
    if isinstance(node, list):
        return [_name_strings(item, named) for item in node]
    return node


def _descriptors(params: Schema, defs: dict[str, Schema], extra: dict[str, Schema] | None = None) -> list[Schema]:
    """By-name params: one content descriptor per member of the params object's schema."""
    target = params
    while "$ref" in target:
        target = defs[target["$ref"].rsplit("/", 1)[1]]
    required = set(target.get("required", []))
    members = {**target.get("properties", {}), **(extra or {})}
    return [
        {"name": name, "required": name in required or name in (extra or {}), "schema": schema}
        for name, schema in members.items()
    ]


def openrpc_document() -> Schema:
    types: list[Any] = []
    for params, result, _ in DAEMON_METHODS.values():
        types += [params, *_results(result)]
    for name in FORWARDED:
        method = protocol.RUNTIME_REQUESTS[name]
        types += [method.params, *DAEMON_RESULTS.get(name, method.results)]
    types += [params for params, _ in NOTIFICATIONS.values()]
    for params, result, _ in CLIENT_REQUESTS.values():
        types += [params, result]
    types += [ThreadDeltaParams, client_api.ToolChoice]
    roots, defs = components(types)
    named = {name: ecma_patterns(msgspec.json.schema(kind)) for name, (kind, _) in NAMED_STRINGS.items()}
    roots, defs = _name_strings(_rewrite_refs(roots), named), _name_strings(_rewrite_refs(defs), named)
    defs |= {name: {**named[name], "title": name, "description": text} for name, (_, text) in NAMED_STRINGS.items()}
    taken = iter(roots)
    methods = []
    for name, (_, kinds, summary) in DAEMON_METHODS.items():
        params = next(taken)
        result = _any_of([next(taken) for _ in _results(kinds)])
        methods.append(_method(name, summary, _descriptors(params, defs), result))
    provider = {"providerId": {"type": "string", "minLength": 1, "description": "The provider (bridge) to ask."}}
    for name in FORWARDED:
        method = protocol.RUNTIME_REQUESTS[name]
        params = next(taken)
        result = _any_of([next(taken) for _ in DAEMON_RESULTS.get(name, method.results)])
        summary = f"Forwarded to the provider's bridge as `{name}` (protocol.md §3.3), turn ids translated."
        descriptors = _descriptors(params, defs, provider)
        if name in CONSTRUCTIONS:
            summary += " `options.tools` chooses among the daemon's hosted tools (the daemon takes it out)."
            descriptors = [_with_tools(d) if d["name"] == "options" else d for d in descriptors]
        methods.append(_method(name, summary, descriptors, result))
    notifications = [
        {"name": name, "summary": summary, "params": next(taken)} for name, (_, summary) in NOTIFICATIONS.items()
    ]
    requests = []
    for name, (_, _, summary) in CLIENT_REQUESTS.items():
        params, result = next(taken), next(taken)
        requests.append({"name": name, "summary": summary, "params": params, "result": result})
    return {
        "openrpc": OPENRPC_VERSION,
        "info": {
            "title": "bbridge daemon client API",
            "version": "0.1.0",
            "description": "JSON-RPC 2.0, one message per line, over the daemon's stdio or Unix socket (docs/api.md).",
        },
        "methods": methods,
        "components": {"schemas": defs},
        "x-notifications": notifications,
        "x-client-requests": requests,
    }


def _results(kinds: Any) -> tuple[Any, ...]:
    """A method's result types: a tuple of several, or one."""
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _any_of(results: list[Schema]) -> Schema:
    """One result's schema, several as `anyOf`, none as any value."""
    return results[0] if len(results) == 1 else {"anyOf": results} if results else {}


def _with_tools(descriptor: Schema) -> Schema:
    """A construction's `options`, the bridge's with the daemon's own `tools` member."""
    tools = {"type": "object", "properties": {"tools": {"$ref": REF + "ToolChoice"}}}
    return {**descriptor, "schema": {"allOf": [descriptor["schema"], tools]}}


def _method(name: str, summary: str, params: list[Schema], result: Schema) -> Schema:
    return {
        "name": name,
        "summary": summary,
        "paramStructure": "by-name",
        "params": params,
        "result": {"name": f"{name} result", "schema": result},
        "errors": ERRORS,
    }


def routed_methods(document: Schema) -> set[str]:
    return {method["name"] for method in document["methods"]}
