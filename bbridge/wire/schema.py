"""JSON Schemas (draft 2020-12) of the bridge wire, generated from the msgspec types.

The grammar (`bbridge.core.grammar`), protocol (`bbridge.wire.protocol`) and canonical
event types below are the single source: msgspec writes the schemas and this
module only adds what msgspec cannot derive from a type.

* Patterns: msgspec patterns end in Python's `\\Z`; JSON Schema patterns are
  ECMA-262 and searched unanchored, and python-jsonschema runs them through
  `re.search`, where `$` also matches before a final newline. `\\Z` becomes
  `$(?!\\n)`, which means end-of-string under both Python and ECMA semantics
  (engines without lookahead, such as RE2, cannot compile it).
* `presentation.detail` is limited in UTF-16 code units (`__post_init__`),
  which `maxLength` (code points) cannot say; `utf16_max_length_pattern` can.
* An extension item needs a delta `presentation` (`__post_init__`): an
  `if`/`then` on every delta carrying both `item` and `presentation`; a user
  question allows free text or offers an option: an `anyOf`.

Residual gaps, enforced by the types' validation code only: a grammar range's
`min <= max` (JSON Schema cannot compare two values) and unique question ids
and option values (`uniqueItems` compares whole items, not one key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeAlias

import msgspec
from msgspec import UNSET, UnsetType

from bbridge.core import grammar
from bbridge.core.grammar import (
    AgentMessageShape,
    BackgroundTaskShape,
    BoundaryError,
    CommandShape,
    DelegationShape,
    ErrorInfo,
    ExtensionKind,
    ExtensionShape,
    FileReadShape,
    ImageViewShape,
    ItemStatus,
    PlanShape,
    PlanStepsShape,
    Presentation,
    RateLimits,
    RawEvent,
    ReasoningShape,
    SearchShape,
    TokenBreakdown,
    TurnStatus,
    WebFetchShape,
    WebSearchShape,
)
from bbridge.core.scalars import ClientRequestId, Number, Wire
from bbridge.wire import client_api, interactions, protocol

DIALECT = "https://json-schema.org/draft/2020-12/schema"
DETAIL_MAX_UTF16 = 280  # grammar.Presentation.__post_init__'s limit (pinned by tests)
WarningCategory = Literal["deprecation", "config", "general", "compaction-skipped"]
FallbackReason = Literal["refusal", "provider"]
Schema: TypeAlias = dict[str, Any]

# -- canonical items (assembler.md §3.3), built from the wire shapes ----------


class TurnScope(Wire, tag_field="kind", tag="turn", kw_only=True):
    turnId: str


class ThreadScope(Wire, tag_field="kind", tag="thread", kw_only=True):
    pass


class CommandExecutionItem(CommandShape, tag="commandExecution", kw_only=True):
    id: str
    status: ItemStatus
    approvalStatus: Literal["denied"] | None
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class FileChangeItemEntry(Wire, kw_only=True):
    path: str
    kind: Literal["add", "update", "delete"]
    movePath: str | UnsetType = UNSET
    diff: str | UnsetType = UNSET


class FileChangeItem(Wire, tag_field="type", tag="fileChange", kw_only=True):
    id: str
    changes: list[FileChangeItemEntry]
    status: ItemStatus
    approvalStatus: Literal["denied"] | None
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class ToolCallItem(Wire, tag_field="type", tag="toolCall", kw_only=True):
    """`arguments` is the shape's `args` when that is a JSON object."""

    id: str
    server: str | UnsetType = UNSET
    tool: str
    arguments: dict[str, Any] | UnsetType = UNSET
    status: ItemStatus
    result: Any | UnsetType = UNSET
    error: str | UnsetType = UNSET
    durationMs: Number | UnsetType = UNSET
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class ContextCompactionItem(Wire, tag_field="type", tag="contextCompaction", kw_only=True):
    id: str
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class AgentMessageItem(AgentMessageShape, tag="agentMessage", kw_only=True):
    id: str
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class ReasoningItem(ReasoningShape, tag="reasoning", kw_only=True):
    id: str
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class PlanItem(PlanShape, tag="plan", kw_only=True):
    id: str
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class WebSearchItem(WebSearchShape, tag="webSearch", kw_only=True):
    id: str
    resultText: str | None
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class WebFetchItem(WebFetchShape, tag="webFetch", kw_only=True):
    id: str
    prompt: str | None
    resultText: str | None
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class ImageViewItem(ImageViewShape, tag="imageView", kw_only=True):
    id: str
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class BackgroundTaskItem(BackgroundTaskShape, tag="backgroundTask", kw_only=True):
    id: str
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class FileReadItem(FileReadShape, tag="fileRead", kw_only=True):
    id: str
    status: ItemStatus
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class SearchItem(SearchShape, tag="search", kw_only=True):
    id: str
    status: ItemStatus
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class DelegationItem(DelegationShape, tag="delegation", kw_only=True):
    id: str
    status: ItemStatus
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class PlanStepsItem(PlanStepsShape, tag="planSteps", kw_only=True):
    id: str
    status: ItemStatus
    parentToolCallId: str | UnsetType = UNSET
    presentation: Presentation | UnsetType = UNSET


class ExtensionItem(ExtensionShape, tag="extension", kw_only=True):
    id: str
    status: ItemStatus
    presentation: Presentation
    parentToolCallId: str | UnsetType = UNSET


CanonicalItem: TypeAlias = (
    CommandExecutionItem | FileChangeItem | ToolCallItem | ContextCompactionItem | AgentMessageItem
    | ReasoningItem | PlanItem | WebSearchItem | WebFetchItem | ImageViewItem | BackgroundTaskItem
    | FileReadItem | SearchItem | DelegationItem | PlanStepsItem | ExtensionItem
)  # fmt: skip

# -- canonical events (assembler.md §3.2); scope types follow the scope policy --

AnyScope: TypeAlias = TurnScope | ThreadScope


class Event(Wire, tag_field="type", kw_only=True):
    """`threadId` is "" until the runtime stamps it."""

    threadId: str


class ProviderThreadEvent(Event, kw_only=True):
    providerThreadId: str


class TurnStartedEvent(ProviderThreadEvent, tag="turn/started", kw_only=True):
    scope: TurnScope
    parentToolCallId: str | UnsetType = UNSET


class TurnCompletedEvent(ProviderThreadEvent, tag="turn/completed", kw_only=True):
    scope: TurnScope
    status: TurnStatus
    error: BoundaryError | UnsetType = UNSET
    providerCheckpointId: str | UnsetType = UNSET


class TurnInputAcceptedEvent(ProviderThreadEvent, tag="turn/input/accepted", kw_only=True):
    scope: TurnScope
    clientRequestId: ClientRequestId


class ItemStartedEvent(ProviderThreadEvent, tag="item/started", kw_only=True):
    scope: TurnScope
    item: CanonicalItem


class ItemCompletedEvent(ProviderThreadEvent, tag="item/completed", kw_only=True):
    scope: TurnScope
    item: CanonicalItem


class StreamEvent(ProviderThreadEvent, kw_only=True):
    scope: TurnScope
    itemId: str
    delta: str
    parentToolCallId: str | UnsetType = UNSET


class AgentMessageDeltaEvent(StreamEvent, tag="item/agentMessage/delta", kw_only=True):
    pass


class ReasoningSummaryTextDeltaEvent(StreamEvent, tag="item/reasoning/summaryTextDelta", kw_only=True):
    pass


class ReasoningTextDeltaEvent(StreamEvent, tag="item/reasoning/textDelta", kw_only=True):
    pass


class PlanDeltaEvent(StreamEvent, tag="item/plan/delta", kw_only=True):
    pass


class CommandOutputDeltaEvent(StreamEvent, tag="item/commandExecution/outputDelta", kw_only=True):
    reset: Literal[True] | UnsetType = UNSET


class FileChangeOutputDeltaEvent(StreamEvent, tag="item/fileChange/outputDelta", kw_only=True):
    pass


class ToolCallProgressEvent(ProviderThreadEvent, tag="item/toolCall/progress", kw_only=True):
    scope: TurnScope
    itemId: str
    message: str | UnsetType = UNSET
    parentToolCallId: str | UnsetType = UNSET


class BackgroundTaskProgressEvent(ProviderThreadEvent, tag="item/backgroundTask/progress", kw_only=True):
    scope: ThreadScope
    item: BackgroundTaskItem


class BackgroundTaskCompletedEvent(ProviderThreadEvent, tag="item/backgroundTask/completed", kw_only=True):
    scope: ThreadScope
    item: BackgroundTaskItem


class DelegationProgressEvent(ProviderThreadEvent, tag="item/delegation/progress", kw_only=True):
    scope: ThreadScope
    item: DelegationItem


class DelegationCompletedEvent(ProviderThreadEvent, tag="item/delegation/completed", kw_only=True):
    scope: ThreadScope
    item: DelegationItem


class TokenUsage(Wire, kw_only=True):
    total: TokenBreakdown
    last: TokenBreakdown
    modelContextWindow: Number | None


class TokenUsageUpdatedEvent(ProviderThreadEvent, tag="thread/tokenUsage/updated", kw_only=True):
    scope: TurnScope
    tokenUsage: TokenUsage


class ContextWindowUsage(Wire, kw_only=True):
    usedTokens: Number | None
    modelContextWindow: Number | None
    estimated: bool


class ContextWindowUsageUpdatedEvent(ProviderThreadEvent, tag="thread/contextWindowUsage/updated", kw_only=True):
    scope: AnyScope
    contextWindowUsage: ContextWindowUsage


class CompactedEvent(ProviderThreadEvent, tag="thread/compacted", kw_only=True):
    scope: TurnScope


class ContextClearedEvent(ProviderThreadEvent, tag="thread/context/cleared", kw_only=True):
    scope: TurnScope


class DiffUpdatedEvent(ProviderThreadEvent, tag="turn/diff/updated", kw_only=True):
    scope: TurnScope
    diff: str


class ProviderErrorEvent(ProviderThreadEvent, tag="provider/error", kw_only=True):
    scope: AnyScope
    message: str
    detail: str | UnsetType = UNSET
    willRetry: bool | UnsetType = UNSET
    errorInfo: ErrorInfo | UnsetType = UNSET


class ProviderWarningEvent(ProviderThreadEvent, tag="provider/warning", kw_only=True):
    scope: AnyScope
    category: WarningCategory
    summary: str | UnsetType = UNSET
    details: str | UnsetType = UNSET


class ModelFallbackEvent(ProviderThreadEvent, tag="provider/modelFallback", kw_only=True):
    scope: AnyScope
    originalModel: str
    fallbackModel: str
    reason: FallbackReason
    message: str


class ProviderUnhandledEvent(ProviderThreadEvent, tag="provider/unhandled", kw_only=True):
    providerId: str
    rawType: str
    rawEvent: RawEvent
    scope: AnyScope
    parentToolCallId: str | UnsetType = UNSET


class RateLimitsUpdatedEvent(ProviderThreadEvent, tag="provider/rateLimits/updated", kw_only=True):
    scope: ThreadScope
    rateLimits: RateLimits


class ExtensionStateUpdatedEvent(ProviderThreadEvent, tag="thread/extensionState/updated", kw_only=True):
    scope: ThreadScope
    kind: ExtensionKind
    payload: Any


class ThreadStartedEvent(Event, tag="thread/started", kw_only=True):
    """The one event without a `providerThreadId` key."""

    scope: ThreadScope


class ThreadIdentityEvent(ProviderThreadEvent, tag="thread/identity", kw_only=True):
    scope: ThreadScope


class ThreadNameUpdatedEvent(ProviderThreadEvent, tag="thread/name/updated", kw_only=True):
    scope: ThreadScope
    threadName: str


ThreadEvent: TypeAlias = (
    TurnStartedEvent | TurnCompletedEvent | TurnInputAcceptedEvent | ItemStartedEvent | ItemCompletedEvent
    | AgentMessageDeltaEvent | ReasoningSummaryTextDeltaEvent | ReasoningTextDeltaEvent | PlanDeltaEvent
    | CommandOutputDeltaEvent | FileChangeOutputDeltaEvent | ToolCallProgressEvent | BackgroundTaskProgressEvent
    | BackgroundTaskCompletedEvent | DelegationProgressEvent | DelegationCompletedEvent | TokenUsageUpdatedEvent
    | ContextWindowUsageUpdatedEvent | CompactedEvent | ContextClearedEvent | DiffUpdatedEvent | ProviderErrorEvent
    | ProviderWarningEvent | ModelFallbackEvent | ProviderUnhandledEvent | RateLimitsUpdatedEvent
    | ExtensionStateUpdatedEvent | ThreadStartedEvent | ThreadIdentityEvent | ThreadNameUpdatedEvent
)  # fmt: skip

# -- post-processing ---------------------------------------------------------


def utf16_max_length_pattern(limit: int) -> str:
    """An ECMA/Python pattern for "at most `limit` UTF-16 code units".

    Python and ECMA `u` regexes count code points; an astral one (outside the
    BMP) is two UTF-16 units, so the length is `cp + astral`. The pattern
    refuses `cp > limit` and, for each k <= limit/2 (enough because
    astral <= cp), "astral >= k and cp > limit - k". Under non-`u` ECMA the
    astral class matches nothing and `[\\s\\S]` counts code units: exact too.
    """
    astral, bmp = r"[^\u0000-\uFFFF]", r"[\u0000-\uFFFF]"
    clauses = [f"(?![\\s\\S]{{{limit + 1}}})"]
    clauses += [f"(?!(?=[\\s\\S]{{{limit + 1 - k}}})(?:{bmp}*{astral}){{{k}}})" for k in range(1, (limit + 1) // 2 + 1)]
    return "^" + "".join(clauses)


def ecma_patterns(node: Any) -> Any:
    """Rewrite every msgspec (Python) pattern into its ECMA-262 equivalent."""
    if isinstance(node, list):
        return [ecma_patterns(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: ecma_patterns(value) for key, value in node.items()}
    pattern = out.get("pattern")
    if isinstance(pattern, str):
        if pattern.endswith(r"\Z"):
            pattern = out["pattern"] = pattern[:-2] + r"$(?!\n)"
        if r"\Z" in pattern or r"\A" in pattern:
            raise ValueError(f"pattern without an ECMA-262 equivalent: {pattern!r}")
    return out


def _refine(defs: dict[str, Schema]) -> None:
    """Add the constraints the types hold in `__post_init__` (see the module docstring)."""
    presentation = defs.get(Presentation.__name__)
    if presentation is not None:
        presentation["properties"]["detail"] |= {
            "maxLength": DETAIL_MAX_UTF16,
            "pattern": utf16_max_length_pattern(DETAIL_MAX_UTF16),
            "$comment": f"at most {DETAIL_MAX_UTF16} UTF-16 code units: maxLength counts code points, the pattern is exact",
        }
    for delta in grammar.AnyDelta.__args__:
        node = defs.get(delta.__name__)
        if node is not None and {"item", "presentation"} <= set(delta.__struct_fields__):
            extension = {"properties": {"type": {"const": ExtensionShape.__struct_config__.tag}}, "required": ["type"]}
            node["if"] = {"properties": {"item": extension}, "required": ["item"]}
            node["then"] = {"required": ["presentation"]}
    question = defs.get(interactions.Question.__name__)
    if question is not None:
        options = {"properties": {"options": {"minItems": 1}}, "required": ["options"]}
        question["anyOf"] = [{"properties": {"allowFreeText": {"const": True}}}, options]


def components(types: Iterable[Any]) -> tuple[list[Schema], dict[str, Schema]]:
    """The schemas of `types` (refs into `#/$defs/`) and their definitions, ECMA patterns and the
    `__post_init__` rules added: what every document here, and the OpenRPC one, is built from."""
    made = msgspec.json.schema_components(list(types), ref_template="#/$defs/{name}")
    roots, defs = msgspec.json.decode(msgspec.json.encode(made))  # JSON-native: tuple defaults become lists
    defs = ecma_patterns(defs)
    _refine(defs)
    return ecma_patterns(roots), defs


def _document(title: str, description: str, root: Schema, defs: dict[str, Schema]) -> Schema:
    return {"$schema": DIALECT, "title": title, "description": description, **root, "$defs": defs}


def thread_delta_schema() -> Schema:
    """`thread/delta` params (grammar v3)."""
    (root,), defs = components([grammar.ThreadDeltaParams])
    return _document("thread/delta params", "A `thread/delta` notification's params, grammar v3.", root, defs)


def initialize_params_schema() -> Schema:
    (root,), defs = components([protocol.InitializeParams])
    return _document("initialize params", "What the runtime sends a bridge in `initialize`.", root, defs)


def initialize_result_schema() -> Schema:
    (root,), defs = components([protocol.InitializeResult])
    return _document("initialize result", "A bridge's handshake answer; absent capabilities are a no.", root, defs)


def _message_document(
    title: str, description: str, table: dict[str, protocol.Method], requests: set[str], *, closed: bool
) -> Schema:
    """A JSON-RPC line whose `params` follow its method (`if`/`then`); `x-results` maps methods to results."""
    results = [alt for method in table.values() for alt in method.results]
    roots, defs = components([method.params for method in table.values()] + results)
    result_refs = iter(roots[len(table) :])
    branches, result_map = [], {}
    for (name, method), params in zip(table.items(), roots, strict=False):
        then: Schema = {
            "properties": {"params": params},
            "required": ["id", "params"] if name in requests else ["params"],
        }
        branches.append({"if": {"properties": {"method": {"const": name}}, "required": ["method"]}, "then": then})
        if method.results:
            refs = [next(result_refs) for _ in method.results]
            result_map[name] = refs[0] if len(refs) == 1 else {"anyOf": refs}
    root: Schema = {
        "type": "object",
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": {"type": ["string", "number"]},
            "method": {"enum": list(table)} if closed else {"type": "string"},
            "params": {},
        },
        "required": ["jsonrpc", "method"],
        "allOf": branches,
        "x-results": result_map,
    }
    return _document(title, description + " `x-results` maps a method to its result's schema.", root, defs)


def runtime_requests_schema() -> Schema:
    """A runtime -> bridge request line (`initialize` and the 18 bridge request methods)."""
    table = protocol.RUNTIME_REQUESTS
    description = "A request the runtime writes to a bridge."
    return _message_document("runtime -> bridge requests", description, table, set(table), closed=True)


def bridge_messages_schema() -> Schema:
    """A bridge -> runtime notification or request line; unknown notifications stay valid (ignored)."""
    table = protocol.BRIDGE_NOTIFICATIONS | protocol.BRIDGE_REQUESTS
    description = "A notification or request a bridge writes to the runtime; other methods are ignored."
    requests = set(protocol.BRIDGE_REQUESTS)
    return _message_document("bridge -> runtime messages", description, table, requests, closed=False)


def events_schema() -> Schema:
    """A canonical ThreadEvent (assembler.md §3.2, §3.3)."""
    (root,), defs = components([ThreadEvent])
    return _document("ThreadEvent", "A canonical event the assembler emits; tagged on `type`.", root, defs)


def client_interactions_schema() -> Schema:
    """The daemon's client API for pending requests: `thread/pending`, `interaction/respond`, and the
    `interaction/opened` / `interaction/resolved` notifications (`bbridge.wire.client_api`)."""
    roots, defs = components(client_api.CLIENT_TYPES)
    names = ("thread/pending params", "thread/pending result", "interaction/respond params",
             "interaction/respond result", "interaction/opened params", "interaction/resolved params")  # fmt: skip
    root = {"x-messages": dict(zip(names, roots, strict=True))}
    description = "Pending approvals, questions and tool calls, as the daemon's clients see them."
    return _document("daemon client API: pending requests", description, root, defs)


SCHEMAS: dict[str, Callable[[], Schema]] = {
    "thread-delta.schema.json": thread_delta_schema,
    "initialize-params.schema.json": initialize_params_schema,
    "initialize-result.schema.json": initialize_result_schema,
    "runtime-requests.schema.json": runtime_requests_schema,
    "bridge-messages.schema.json": bridge_messages_schema,
    "events.schema.json": events_schema,
    "client-interactions.schema.json": client_interactions_schema,
}
