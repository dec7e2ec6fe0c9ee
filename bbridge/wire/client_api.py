"""The daemon's own client API (docs/api.md): its methods, notifications and relayed
requests, as msgspec types; `bbridge.wire.openrpc` describes the API from them. Pending bridge requests:

* `thread/pending {threadId?}` → `{pending: [PendingRequest], resolved?: [Resolution]}` (a thread's recent
  resolutions when a thread is named);
* `interaction/respond {requestId, result | error, warning?}` → `{ok: true}`; a request already resolved is
  refused (-32020, naming who answered first), an unknown one too (-32021); `warning`, what the answering client
  could not do (e.g. show a question), goes on the request's thread as a `provider/warning` event;
* notifications to every client: `interaction/opened` (a `PendingRequest` without `ageS`) and
  `interaction/resolved` (a `Resolution`).

A call of a tool the daemon hosts asks through the same path: an `interaction/request` (payload `approval`,
subject `tool_use`, decisions `allow_once | allow_for_session | deny`) with `hostedTool` beside the payload; so
does an `ask` budget (`[[budgets]]`, subject `tool_use` naming the method it holds), with `budget` beside it.

Turn inputs (the canonical events keep no prompt text):

* `thread/inputs {threadId, afterSentAt?}` → `{inputs: [TurnInputRecord]}`, oldest first;
* notification to every client: `thread/input` (a `TurnInputRecord` with `threadId` and `providerId`).

Hidden threads (issue 48): a construction's `hidden {runId, role}` (`HiddenThread`) marks a thread a room above the
daemon runs for itself (a Perspectives run's planner, workers, synthesis, expert). It is journaled and addressable by
id like any thread, but `daemon/status` lists it only when asked (`DaemonStatusParams.includeHidden`), and every
client is told `thread/hidden` (`ThreadHiddenNotification`) before its bridge is asked, so a list can leave it out.

These Structs are what the daemon decodes `interaction/respond` with and what `bbridge schema` exports.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from bbridge.core.scalars import NonEmpty, Wire
from bbridge.wire import interactions, protocol
from bbridge.wire.usage import BudgetRefusal, BudgetState

RequestMethod = Literal["interaction/request", "item/tool/call"]
HiddenRole = Literal["planner", "worker", "synthesis", "expert"]  # what a hidden thread does in its run
WARNING_MAX = 2000  # `interaction/respond`'s `warning`: a sentence or two, not a document


class ErrorBody(Wire, kw_only=True):
    code: int
    message: str


class ThreadMcpServer(Wire, kw_only=True, forbid_unknown_fields=True):
    """A stdio MCP server a construction brings for its thread alone (an editor's ACP `session/new` `mcpServers`):
    `command` is the argv (no shell), `env` extra variables over the few the SDK passes on (HOME, PATH, …). The
    tool host starts it in the thread's `cwd`, offers its tools as `NAME__tool` and stops it when the thread is
    let go; the daemon must allow it (`bbridge serve --allow-client-mcp-servers`), else it is refused (-32602)."""

    name: NonEmpty
    command: Annotated[list[NonEmpty], msgspec.Meta(min_length=1)]
    env: dict[str, str] | UnsetType = UNSET


class ToolChoice(Wire, kw_only=True, forbid_unknown_fields=True):
    """`options.tools` on `thread/start`, `thread/resume` and `thread/fork`: which of the daemon's hosted tools the
    thread gets (all when absent): `include` only those, `exclude` all but those; and `mcpServers`, the thread's
    own MCP servers, every tool of which it gets (a daemon-wide tool of the same name shadows one). The daemon
    takes it out before the bridge sees the options; a name no hosted tool has is refused (-32602, naming the
    hosted tools)."""

    include: list[NonEmpty] | UnsetType = UNSET
    exclude: list[NonEmpty] | UnsetType = UNSET
    mcpServers: Annotated[list[ThreadMcpServer], msgspec.Meta(max_length=16)] | UnsetType = UNSET


class HiddenThread(Wire, kw_only=True, forbid_unknown_fields=True):
    """`hidden` on `thread/start`, `thread/resume` and `thread/fork`: the thread is one a room runs for itself (its
    run's id and the thread's role there). The daemon keeps the mark (beside the journal with `--journal`), lists
    the thread only when asked, and takes the member out before the bridge sees the params."""

    runId: NonEmpty
    role: HiddenRole


class ForwardedOptions(Wire, kw_only=True):
    """What the daemon reads of a construction's or a turn's `options`: the hosted-tool choice it takes out, and the
    instructions and environment agent configuration composes with (the rest is the bridge's to decode)."""

    tools: ToolChoice | UnsetType = UNSET
    model: str | UnsetType = UNSET
    instructions: str | UnsetType = UNSET
    envVars: dict[str, str] | UnsetType = UNSET


class TraceMeta(Wire, kw_only=True):
    """`_meta` on `turn/start`: W3C trace context, as ACP's meta propagation carries it (`traceparent`, `tracestate`).
    With `[telemetry]` the turn's span is the child of `traceparent` (an invalid one starts a trace of its own); the
    daemon takes `_meta` out before the bridge sees the params. Other members are ignored."""

    traceparent: str | UnsetType = UNSET
    tracestate: str | UnsetType = UNSET


class ForwardedParams(Wire, kw_only=True):
    """What the daemon reads of a forwarded method's params, decoded once when the request arrives. The bridge
    receives the client's params as sent but for the daemon's own changes (`runtime.outgoing`): `providerId`, `hidden`,
    `_meta` and `options.tools` taken out, `providerThreadId` filled in from the thread's record, a bb turn id mapped to the
    provider's, the hosted tools added to `dynamicTools`, the resolved agent configuration applied. Every other
    member is the bridge's to check, against its protocol type."""

    providerId: NonEmpty | UnsetType = UNSET
    threadId: NonEmpty | UnsetType = UNSET
    providerThreadId: NonEmpty | UnsetType = UNSET
    cwd: NonEmpty | UnsetType = UNSET
    intent: str | UnsetType = UNSET  # thread/stop: `interrupt` or `release`
    expectedTurnId: NonEmpty | UnsetType = UNSET  # turn/steer: a bb turn id
    activeTurnId: NonEmpty | UnsetType | None = UNSET  # thread/stop: a bb turn id
    dynamicTools: list[Any] | UnsetType | None = UNSET  # checked as declarations (JSON Schema), not here
    options: ForwardedOptions | UnsetType = UNSET
    input: list[Any] | UnsetType = UNSET  # turn/start, turn/steer: kept as sent (`thread/inputs`)
    clientRequestId: str | UnsetType = UNSET
    hidden: HiddenThread | UnsetType = UNSET  # a construction's: the daemon's own member, never sent to the bridge
    meta: TraceMeta | UnsetType | None = msgspec.field(default=UNSET, name="_meta")  # the daemon's too: trace context


class ThreadHiddenNotification(Wire, kw_only=True):
    """`thread/hidden`: a hidden thread is being constructed (sent before its bridge is asked, so a client that
    lists threads can leave it out before any of its events arrive)."""

    threadId: str
    providerId: str
    runId: str
    role: HiddenRole


class DaemonStatusParams(Wire, kw_only=True):
    """`daemon/status`: hidden threads are listed only with `includeHidden` (each row then carries `hidden: true`,
    its `runId` and `role`); the `daemon` section counts them (`hiddenThreads`) either way."""

    includeHidden: bool = False


class ThreadPendingParams(Wire, kw_only=True, forbid_unknown_fields=True):
    threadId: NonEmpty | UnsetType = UNSET


class InteractionOpenedParams(Wire, kw_only=True):
    """A bridge request opened: the params are what the bridge sent (`requestId` and `providerId` added)."""

    requestId: NonEmpty
    threadId: str | None
    providerId: NonEmpty
    method: RequestMethod
    kind: str  # approval | user_question | tool_call | another payload kind
    params: dict[str, Any]
    openedAt: float  # seconds since the epoch


class PendingRequest(InteractionOpenedParams, kw_only=True):
    ageS: float


class Resolution(Wire, kw_only=True):
    """How a request was resolved: by a client (its connection's name, and `client`: what it called itself in
    `initialize`, when it said) or by the daemon (`daemon:timeout`, `daemon:thread-stop`, `daemon:bridge-exit`;
    `daemon:call-cancelled`: a hosted tool's approval whose call was cancelled meanwhile);
    exactly one of `result` and `error`."""

    requestId: NonEmpty
    threadId: str | None
    providerId: NonEmpty
    method: RequestMethod
    kind: str
    openedAt: float
    resolvedAt: float
    resolvedBy: NonEmpty
    result: Any | UnsetType = UNSET
    error: ErrorBody | UnsetType = UNSET
    client: ClientInfo | UnsetType = UNSET  # a client's resolution: what it called itself in initialize


class ThreadPendingResult(Wire, kw_only=True):
    pending: list[PendingRequest]
    resolved: list[Resolution] | UnsetType = UNSET


class InteractionRespondParams(Wire, kw_only=True, forbid_unknown_fields=True):
    """The answer; `warning`: why it is not what the agent asked for (an editor that cannot show a question
    answers it with no answer), said on the request's thread as a `provider/warning` (category `general`, this
    text as its summary) once the answer is taken, so every client's timeline and the journal show it."""

    requestId: NonEmpty
    result: msgspec.Raw | UnsetType = UNSET
    error: ErrorBody | UnsetType = UNSET
    warning: Annotated[str, msgspec.Meta(min_length=1, max_length=WARNING_MAX)] | UnsetType = UNSET


class InteractionRespondResult(Wire, kw_only=True):
    ok: Literal[True]


class Empty(Wire, kw_only=True):
    pass


class ClientInfo(Wire, kw_only=True):
    name: str
    version: str


class DaemonInitializeParams(Wire, kw_only=True):
    protocolVersion: int | UnsetType = UNSET
    client: ClientInfo | UnsetType = UNSET
    token: str | UnsetType = UNSET  # required on a socket started with --token-file


class ProviderState(Wire, kw_only=True):
    providerId: str
    state: str  # idle | starting | ready | failed | exited
    reason: str | UnsetType = UNSET  # why it failed (its last start, until one succeeds)


class DaemonInitializeResult(Wire, kw_only=True):
    daemon: ClientInfo
    protocolVersion: int
    grammarVersions: tuple[int, int]
    providers: list[ProviderState]


class ShadowedTool(Wire, kw_only=True):
    """A hosted tool a client's own `dynamicTools` entry shadowed, as first seen (reported once per tool name)."""

    tool: str
    threadId: str | None  # the construction's thread
    client: str  # the connection that declared it
    at: float  # seconds since the epoch


class HostedToolsStatus(Wire, kw_only=True):
    """`daemon/status`'s `hostedTools`: the tool host's own report (the tools it serves, those it refused and why,
    those `bbridge.toml` shadowed: its keys beside these; none when the daemon hosts no tools) and the hosted tools
    client declarations shadowed."""

    shadowedByClients: list[ShadowedTool]
    clientMcpServers: bool = (
        False  # a construction may bring its thread's MCP servers (serve --allow-client-mcp-servers)
    )


class DaemonStatus(Wire, kw_only=True):
    """`daemon/status`: sections a later daemon may extend (clients show unknown ones generically)."""

    daemon: dict[str, Any]
    providers: list[dict[str, Any]]
    threads: list[dict[str, Any]]
    pending: int
    counters: dict[str, int]
    config: dict[str, Any]
    journal: dict[str, Any]
    # per provider: cumulative `buckets` ([upper bound in s, or null for +Inf; count]), `count` and `sumS`
    turnDurations: dict[str, Any] = msgspec.field(default_factory=dict)
    hostedTools: HostedToolsStatus | UnsetType = UNSET
    budgets: list[BudgetState] = msgspec.field(
        default_factory=list
    )  # each [[budgets]] entry and what is spent against it
    agentConfig: dict[str, Any] | UnsetType = UNSET  # `[[agents]]`: contributions and roots loaded, refusals, errors
    perspectives: dict[str, Any] | UnsetType = UNSET  # the Perspectives room's report (`{runs: {outcome: n}}`)


class InputClient(Wire, kw_only=True):
    """Who sent a turn input: its connection's name, and what it called itself in `initialize` (when it said)."""

    connection: str
    name: str | UnsetType = UNSET
    version: str | UnsetType = UNSET


class ThreadInputsParams(Wire, kw_only=True, forbid_unknown_fields=True):
    threadId: NonEmpty
    afterSentAt: float | UnsetType = UNSET  # only the inputs sent after this (seconds since the epoch)


class TurnInputRecord(Wire, kw_only=True):
    """A `turn/start` or `turn/steer` its bridge accepted, matched to the `turn/input/accepted` event by
    `clientRequestId`. `input` is as sent, within 32 KiB in all: longer strings cut, a nested value that does not fit
    (a text's `mentions`) left out (`truncated: true` then)."""

    clientRequestId: str
    method: Literal["turn/start", "turn/steer"]
    input: list[dict[str, Any]]
    sentAt: float  # when the daemon received it, seconds since the epoch
    client: InputClient
    truncated: bool | UnsetType = UNSET


class ThreadInputsResult(Wire, kw_only=True):
    inputs: list[TurnInputRecord]


class ThreadInputNotification(TurnInputRecord, kw_only=True):
    threadId: str
    providerId: str


class ThreadStopAnswer(protocol.ThreadStopResult, kw_only=True):
    """`thread/stop` as the daemon answers it: the bridge's result, or, when the bridge refused an interrupt after
    the turn had ended (a declined approval settled it first), `{turnAlreadyEnded: true}`."""

    turnAlreadyEnded: bool | UnsetType = UNSET


class ThreadEventsParams(Wire, kw_only=True):
    threadId: NonEmpty
    afterSeq: Annotated[int, msgspec.Meta(ge=0)] = 0


class Entry(Wire, kw_only=True):
    seq: int
    event: dict[str, Any]  # a canonical ThreadEvent (events.schema.json)


class ThreadEventsResult(Wire, kw_only=True):
    events: list[Entry]
    lastSeq: int
    missingThrough: int | UnsetType = UNSET  # the journal's bound dropped the events up to this seq


class ThreadEventsNotification(Wire, kw_only=True):
    threadId: str
    providerId: str
    events: list[Entry]


class BridgeStatus(Wire, kw_only=True):
    providerId: str
    state: str
    pid: int | None
    exitCode: int | UnsetType = UNSET
    signal: int | UnsetType = UNSET
    reason: str | UnsetType = UNSET


class ForwardedIdentity(protocol.ThreadIdentityParams, kw_only=True):
    providerId: str


class Forwarded(Wire, kw_only=True):
    """A bridge notification passed on with the `providerId` it came from (protocol.md §3.5)."""

    providerId: str
    threadId: str | UnsetType = UNSET


class HostedToolAsk(Wire, kw_only=True):
    """What a hosted tool's call would do, beside its approval's payload (subject `tool_use`)."""

    tool: str
    arguments: Any  # as the model gave them, checked against the tool's schema
    argv: list[str] | UnsetType = UNSET  # the command it would run, one element per argument (never a shell)


class RelayedInteraction(interactions.InteractionRequestParams, kw_only=True):
    providerId: str
    requestId: str
    hostedTool: HostedToolAsk | UnsetType = UNSET  # an approval a call of a tool the daemon hosts asks for
    budget: BudgetRefusal | UnsetType = UNSET  # an approval an `ask` budget past its limit asks for


class RelayedToolCall(interactions.ToolCallParams, kw_only=True):
    providerId: str
    requestId: str


CLIENT_TYPES = (
    ThreadPendingParams,
    ThreadPendingResult,
    InteractionRespondParams,
    InteractionRespondResult,
    InteractionOpenedParams,
    Resolution,
)

# The daemon's notifications to its clients, by method: their params' types (`openrpc` describes each from here,
# `bbridge.client` decodes each with it; two methods share `Forwarded`).
NOTIFICATION_PARAMS: dict[str, type[Wire]] = {
    "thread/events": ThreadEventsNotification,
    "bridge/status": BridgeStatus,
    "thread/identity": ForwardedIdentity,
    "session/replaced": Forwarded,
    "provider/recovery": Forwarded,
    "interaction/opened": InteractionOpenedParams,
    "interaction/resolved": Resolution,
    "thread/input": ThreadInputNotification,
    "thread/hidden": ThreadHiddenNotification,
}
NotificationParams = (
    ThreadEventsNotification
    | BridgeStatus
    | ForwardedIdentity
    | Forwarded
    | InteractionOpenedParams
    | Resolution
    | ThreadInputNotification
    | ThreadHiddenNotification
)
