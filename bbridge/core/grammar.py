"""The `thread/delta` grammar v3 as msgspec types (assembler.md §2).

Decoding into these types *is* validation and normalization: unknown keys are
dropped, known keys come back in schema (field) order, absent optional keys
stay `UNSET` (never `None`, which is JSON null). Opaque JSON (tool args and
results, extension payloads, raw params) is typed `Any` and passes through
untouched. A notification with one bad delta fails as a whole.
"""

from __future__ import annotations

import functools
import math
import re
import typing
from typing import Annotated, Any, Literal, TypeAlias

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

GRAMMAR_VERSIONS = (3, 3)
SEP = "\x1f"
MAX_SAFE = 2**53 - 1

# -- scalars -----------------------------------------------------------------

# A key part is non-empty and holds no U+001F (the key separator). msgspec checks the length; the U+001F rule is
# no msgspec `pattern`, whose check costs about 0.3 µs a string, a third of decoding a whole delta line. Every
# decoding entry point below runs it (`key_part_fault`) where U+001F can be: JSON text holds it only through a
# `\u001f` escape (msgspec refuses raw control characters), which `ESCAPED_SEPARATOR` finds in one scan.
KEY_PART_PATTERN = r"^[^\x1f]+\Z"
ESCAPED_SEPARATOR = re.compile(rb"\\u001[fF]")
_KEY_PART = Meta(min_length=1, extra_json_schema={"pattern": KEY_PART_PATTERN})
KeyPart = Annotated[str, _KEY_PART]
NonEmpty = Annotated[str, Meta(min_length=1)]
ClientRequestId = Annotated[str, Meta(pattern=r"^creq_[23456789abcdefghijkmnpqrstuvwxyz]{10}\Z")]
ExtensionKind = Annotated[str, Meta(pattern=r"^[a-z0-9-]+/[a-z0-9-]+\Z")]
SafeInt = Annotated[int, Meta(ge=-MAX_SAFE, le=MAX_SAFE)]
PosInt = Annotated[int, Meta(gt=0, le=MAX_SAFE)]
Number: TypeAlias = int | float

TextChannel = Literal["agentMessage", "reasoningSummary", "reasoningText", "plan"]
OutputChannel = Literal["command", "fileChange"]
ItemStatus = Literal["pending", "completed", "failed", "interrupted"]
TurnStatus = Literal["completed", "failed", "interrupted"]
Attach = Literal["open", "currentOrLast"]
LimitStatus = Literal["allowed", "warning", "blocked", "unknown"]
ErrorCategory = Literal[
    "active-turn-not-steerable", "bad-request", "connection-failed", "context-window-exceeded",
    "billing", "budget-exceeded", "internal", "max-output-tokens", "max-turns", "overloaded",
    "policy", "rate-limit", "sandbox", "stream-disconnected", "structured-output-retries",
    "thread-rollback-failed", "too-many-failed-attempts", "unauthorized", "unknown",
]  # fmt: skip


def _js_numbers(obj: Struct, names: tuple[str, ...]) -> None:
    """Numbers as JavaScript holds them: non-finite values are invalid, integral ones are integers.

    A double like `1.0` or `-0.0` is the integer 1 or 0 to the reference (`JSON.stringify` writes `1`,
    `0`); storing it as an int makes the encoder write the same bytes. A `__post_init__` calls this only
    once one of its fields holds a float: most numbers arrive as integers, and testing the fields' types
    costs a fraction of this loop.
    """
    for name in names:
        value = getattr(obj, name)
        if type(value) is float:
            if not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number")
            if value.is_integer() and abs(value) < 1e21:
                setattr(obj, name, int(value))


def js_float(literal: str) -> Any:
    """`float_hook` for opaque JSON: integral doubles become ints, as `JSON.parse` + `JSON.stringify` would."""
    value = float(literal)
    return int(value) if value.is_integer() and abs(value) < 1e21 else value


class Wire(Struct, kw_only=True, gc=False):
    """Base of every wire object: keyword-only so schema order can mix optional and required."""


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit the reference's limits are measured in."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


# -- shared sub-schemas ------------------------------------------------------


class ItemKey(Wire, kw_only=True):
    providerItemId: KeyPart | UnsetType = UNSET
    channel: KeyPart | UnsetType = UNSET
    parentRef: KeyPart | UnsetType = UNSET


class Label(Wire, kw_only=True):
    pending: NonEmpty
    completed: NonEmpty


class Icon(Wire, kw_only=True):
    glyph: NonEmpty


class Tint(Wire, kw_only=True):
    light: NonEmpty
    dark: NonEmpty


class Presentation(Wire, kw_only=True):
    label: Label
    icon: Icon
    title: str | UnsetType = UNSET
    detail: str | UnsetType = UNSET
    suppress: bool | UnsetType = UNSET
    tint: Tint | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.detail is not UNSET and len(self.detail) > 140 and utf16_len(self.detail) > 280:
            raise ValueError("detail is longer than 280 UTF-16 code units")


class RawEvent(Wire, kw_only=True):
    jsonrpc: Literal["2.0"]
    id: str | Number | UnsetType = UNSET
    method: str
    params: Any | UnsetType = UNSET

    def __post_init__(self) -> None:
        if type(self.id) is float:
            _js_numbers(self, ("id",))


class NoTurnFallback(Wire, kw_only=True):
    raw: RawEvent
    rawType: str


class ErrorInfo(Wire, kw_only=True):
    category: ErrorCategory
    providerCode: str | None
    httpStatusCode: Number | None

    def __post_init__(self) -> None:
        if type(self.httpStatusCode) is float:
            _js_numbers(self, ("httpStatusCode",))


class TokenBreakdown(Wire, kw_only=True):
    totalTokens: Number
    inputTokens: Number
    cachedInputTokens: Number
    outputTokens: Number
    reasoningOutputTokens: Number

    def __post_init__(self) -> None:
        if float in (
            type(self.totalTokens),
            type(self.inputTokens),
            type(self.cachedInputTokens),
            type(self.outputTokens),
            type(self.reasoningOutputTokens),
        ):
            _js_numbers(
                self, ("totalTokens", "inputTokens", "cachedInputTokens", "outputTokens", "reasoningOutputTokens")
            )


class PlanStep(Wire, kw_only=True):
    step: str
    status: Literal["pending", "active", "completed", "failed"] | UnsetType = UNSET


class TaskUsage(Wire, kw_only=True):
    totalTokens: Number
    toolUses: Number
    durationMs: Number

    def __post_init__(self) -> None:
        if float in (type(self.totalTokens), type(self.toolUses), type(self.durationMs)):
            _js_numbers(self, ("totalTokens", "toolUses", "durationMs"))


class WorkflowPhase(Wire, kw_only=True):
    index: PosInt
    title: str
    kind: str | UnsetType = UNSET


class WorkflowAgent(Wire, kw_only=True):
    index: PosInt
    label: str
    state: Literal["queued", "running", "done", "failed", "skipped"]
    model: str
    attempt: PosInt
    cached: bool
    lastProgressAt: Number
    phaseIndex: PosInt | UnsetType = UNSET
    phaseTitle: str | UnsetType = UNSET
    agentType: str | UnsetType = UNSET
    isolation: str | UnsetType = UNSET
    queuedAt: Number | UnsetType = UNSET
    startedAt: Number | UnsetType = UNSET
    lastToolName: str | UnsetType = UNSET
    lastToolSummary: str | UnsetType = UNSET
    promptPreview: str | UnsetType = UNSET
    resultPreview: str | UnsetType = UNSET
    error: str | UnsetType = UNSET
    tokens: Number | UnsetType = UNSET
    toolCalls: Number | UnsetType = UNSET
    durationMs: Number | UnsetType = UNSET

    def __post_init__(self) -> None:
        if float in (
            type(self.lastProgressAt),
            type(self.queuedAt),
            type(self.startedAt),
            type(self.tokens),
            type(self.toolCalls),
            type(self.durationMs),
        ):
            _js_numbers(self, ("lastProgressAt", "queuedAt", "startedAt", "tokens", "toolCalls", "durationMs"))


class Workflow(Wire, kw_only=True):
    phases: list[WorkflowPhase]
    agents: list[WorkflowAgent]


class RateLimitWindow(Wire, kw_only=True):
    providerKey: NonEmpty | None
    label: NonEmpty | None
    status: LimitStatus
    resetsAtMs: Annotated[int, Meta(ge=0, le=MAX_SAFE)] | None


class RateLimits(Wire, kw_only=True):
    providerId: NonEmpty
    status: LimitStatus
    kind: Literal["subscription-window", "credits", "spend-control", "unknown"]
    windows: list[RateLimitWindow]
    reachedReason: NonEmpty | None
    overageStatus: Literal["allowed", "warning", "rejected", "unavailable"] | None
    overageReason: NonEmpty | None


class BoundaryError(Wire, kw_only=True):
    message: str


class FileChangeEntry(Wire, kw_only=True):
    path: str
    kind: Literal["add", "update", "delete"]
    movePath: str | UnsetType = UNSET
    diff: str | UnsetType = UNSET
    oldText: str | UnsetType = UNSET
    newText: str | UnsetType = UNSET


# -- item shapes (tagged on "type") ------------------------------------------


class Shape(Wire, tag_field="type"):
    pass


class CommandShape(Shape, tag="command", kw_only=True):
    command: str
    cwd: str
    aggregatedOutput: str | UnsetType = UNSET
    exitCode: Number | UnsetType = UNSET
    durationMs: Number | UnsetType = UNSET

    def __post_init__(self) -> None:
        if float in (type(self.exitCode), type(self.durationMs)):
            _js_numbers(self, ("exitCode", "durationMs"))


class FileChangeShape(Shape, tag="fileChange", kw_only=True):
    changes: list[FileChangeEntry]


class ToolShape(Shape, tag="tool", kw_only=True):
    tool: str
    server: str | UnsetType = UNSET
    args: Any | UnsetType = UNSET
    result: Any | UnsetType = UNSET
    error: str | UnsetType = UNSET
    durationMs: Number | UnsetType = UNSET

    def __post_init__(self) -> None:
        if type(self.durationMs) is float:
            _js_numbers(self, ("durationMs",))


class CompactionShape(Shape, tag="compaction", kw_only=True):
    pass


class AgentMessageShape(Shape, tag="agentMessage", kw_only=True):
    text: str


class ReasoningShape(Shape, tag="reasoning", kw_only=True):
    summary: list[str]
    content: list[str]


class PlanShape(Shape, tag="plan", kw_only=True):
    text: str


class WebSearchShape(Shape, tag="webSearch", kw_only=True):
    queries: Annotated[list[str], Meta(min_length=1)]


class WebFetchShape(Shape, tag="webFetch", kw_only=True):
    url: str
    prompt: str | UnsetType | None = UNSET
    pattern: str | None


class ImageViewShape(Shape, tag="imageView", kw_only=True):
    path: str


class BackgroundTaskShape(Shape, tag="backgroundTask", kw_only=True):
    familyId: NonEmpty
    taskType: str
    description: str
    status: ItemStatus
    taskStatus: Literal["pending", "running", "paused", "completed", "failed", "killed", "stopped"]
    skipTranscript: bool
    workflowName: str | UnsetType = UNSET
    workflow: Workflow | UnsetType = UNSET
    usage: TaskUsage | UnsetType = UNSET
    summary: str | UnsetType = UNSET
    error: str | UnsetType = UNSET
    outputFile: str | UnsetType = UNSET


class FileReadShape(Shape, tag="fileRead", kw_only=True):
    path: str
    cmd: str | UnsetType = UNSET


class SearchShape(Shape, tag="search", kw_only=True):
    mode: Literal["content", "path", "list"]
    query: str
    path: str | UnsetType = UNSET
    cmd: str | UnsetType = UNSET


class DelegationShape(Shape, tag="delegation", kw_only=True):
    childRef: KeyPart
    label: str
    background: bool
    summary: str | UnsetType = UNSET


class PlanStepsShape(Shape, tag="planSteps", kw_only=True):
    steps: list[PlanStep]
    explanation: str | UnsetType = UNSET


class ExtensionShape(Shape, tag="extension", kw_only=True):
    kind: ExtensionKind
    payload: Any


ItemShape: TypeAlias = (
    CommandShape | FileChangeShape | ToolShape | CompactionShape | AgentMessageShape
    | ReasoningShape | PlanShape | WebSearchShape | WebFetchShape | ImageViewShape
    | BackgroundTaskShape | FileReadShape | SearchShape | DelegationShape | PlanStepsShape
    | ExtensionShape
)  # fmt: skip

# -- the 26 delta kinds (tagged on "kind") -----------------------------------


class Delta(Wire, tag_field="kind"):
    pass


class InputAccepted(Delta, tag="input.accepted", kw_only=True):
    clientRequestId: ClientRequestId
    providerTurnId: KeyPart | UnsetType = UNSET


class TurnOpen(Delta, tag="turn.open", kw_only=True):
    providerTurnId: KeyPart | UnsetType = UNSET
    parentRef: KeyPart | UnsetType = UNSET


class TurnBoundary(Delta, tag="turn.boundary", kw_only=True):
    status: TurnStatus
    error: BoundaryError | UnsetType = UNSET
    providerCheckpointId: NonEmpty | UnsetType = UNSET
    claimIfIdle: bool | UnsetType = UNSET
    providerTurnId: KeyPart | UnsetType = UNSET


def _require_presentation(presentation: Presentation | UnsetType) -> None:
    """An extension item's rule (its caller tests the item's type: the common case costs one test)."""
    if presentation is UNSET:
        raise ValueError("an extension item needs a presentation")


class ItemOpen(Delta, tag="item.open", kw_only=True):
    key: ItemKey
    item: ItemShape
    presentation: Presentation | UnsetType = UNSET
    attach: Attach | UnsetType = UNSET
    providerTurnId: KeyPart | UnsetType = UNSET
    noTurnFallback: NoTurnFallback | UnsetType = UNSET

    def __post_init__(self) -> None:
        if type(self.item) is ExtensionShape:
            _require_presentation(self.presentation)


class ItemClose(Delta, tag="item.close", kw_only=True):
    key: ItemKey
    status: ItemStatus
    resultText: str | UnsetType = UNSET
    exitCode: Number | UnsetType = UNSET
    aggregatedOutput: str | UnsetType = UNSET
    approvalStatus: Literal["denied"] | UnsetType = UNSET
    item: ItemShape
    presentation: Presentation | UnsetType = UNSET
    providerTurnId: KeyPart | UnsetType = UNSET
    noTurnFallback: NoTurnFallback | UnsetType = UNSET

    def __post_init__(self) -> None:
        if type(self.exitCode) is float:
            _js_numbers(self, ("exitCode",))
        if type(self.item) is ExtensionShape:
            _require_presentation(self.presentation)


class ItemProgress(Delta, tag="item.progress", kw_only=True):
    key: ItemKey
    message: str | UnsetType = UNSET
    snapshot: BackgroundTaskShape | DelegationShape | UnsetType = UNSET
    flush: bool | UnsetType = UNSET
    providerTurnId: KeyPart | UnsetType = UNSET
    noTurnFallback: NoTurnFallback | UnsetType = UNSET


class ItemTextDelta(Delta, tag="item.textDelta", kw_only=True):
    key: ItemKey
    channel: TextChannel
    text: str
    providerTurnId: KeyPart | UnsetType = UNSET
    noTurnFallback: NoTurnFallback | UnsetType = UNSET


class ItemTextClose(Delta, tag="item.textClose", kw_only=True):
    key: ItemKey
    channel: TextChannel
    text: str | UnsetType = UNSET
    providerTurnId: KeyPart | UnsetType = UNSET
    noTurnFallback: NoTurnFallback | UnsetType = UNSET


class ItemOutputDelta(Delta, tag="item.outputDelta", kw_only=True):
    key: ItemKey
    channel: OutputChannel
    text: str
    providerTurnId: KeyPart | UnsetType = UNSET
    noTurnFallback: NoTurnFallback | UnsetType = UNSET


class CommandOutputSnapshot(Delta, tag="command.outputSnapshot", kw_only=True):
    key: ItemKey
    text: str
    noTurnFallback: NoTurnFallback | UnsetType = UNSET


class Usage(Delta, tag="usage", kw_only=True):
    total: TokenBreakdown
    last: TokenBreakdown
    modelContextWindow: Number | None
    providerTurnId: KeyPart | UnsetType = UNSET

    def __post_init__(self) -> None:
        if type(self.modelContextWindow) is float:
            _js_numbers(self, ("modelContextWindow",))


class ContextWindow(Delta, tag="contextWindow", kw_only=True):
    used: Number | None
    size: Number | UnsetType | None = UNSET
    estimated: bool
    attach: Attach
    providerTurnId: KeyPart | UnsetType = UNSET

    def __post_init__(self) -> None:
        if float in (type(self.used), type(self.size)):
            _js_numbers(self, ("used", "size"))


class ContextCompacted(Delta, tag="context.compacted", kw_only=True):
    providerTurnId: KeyPart | UnsetType = UNSET
    noTurnFallback: NoTurnFallback | UnsetType = UNSET


class ContextCleared(Delta, tag="context.cleared", kw_only=True):
    pass


class TurnDiff(Delta, tag="turn.diff", kw_only=True):
    diff: str
    providerTurnId: KeyPart | UnsetType = UNSET


class ThreadStarted(Delta, tag="thread.started", kw_only=True):
    pass


class ThreadIdentity(Delta, tag="thread.identity", kw_only=True):
    providerThreadId: NonEmpty


class ThreadName(Delta, tag="thread.name", kw_only=True):
    name: NonEmpty


class ExtensionState(Delta, tag="extension.state", kw_only=True):
    extensionKind: ExtensionKind
    payload: Any


class ProviderRateLimits(Delta, tag="provider.rateLimits", kw_only=True):
    rateLimits: RateLimits


class ProviderError(Delta, tag="provider.error", kw_only=True):
    message: str
    detail: str | UnsetType = UNSET
    willRetry: bool | UnsetType = UNSET
    category: ErrorCategory | UnsetType = UNSET
    errorInfo: ErrorInfo | UnsetType = UNSET
    settlesTurn: bool | UnsetType = UNSET
    providerTurnId: KeyPart | UnsetType = UNSET
    threadScoped: bool | UnsetType = UNSET


class ProviderModelFallback(Delta, tag="provider.modelFallback", kw_only=True):
    originalModel: NonEmpty
    fallbackModel: NonEmpty
    reason: Literal["refusal", "provider"]
    message: str


class ProviderWarning(Delta, tag="provider.warning", kw_only=True):
    summary: str | UnsetType = UNSET
    details: str | UnsetType = UNSET
    category: Literal["deprecation", "config", "general", "compaction-skipped"] | UnsetType = UNSET
    vouchedTurn: bool | UnsetType = UNSET


class Unhandled(Delta, tag="unhandled", kw_only=True):
    raw: RawEvent
    rawType: str
    vouchedTurn: bool
    onlyIfNoTurn: bool | UnsetType = UNSET
    parentRef: KeyPart | UnsetType = UNSET
    providerTurnId: KeyPart | UnsetType = UNSET


class SessionEnded(Delta, tag="session.ended", kw_only=True):
    pass


class SessionReset(Delta, tag="session.reset", kw_only=True):
    pass


AnyDelta: TypeAlias = (
    InputAccepted | TurnOpen | TurnBoundary | ItemOpen | ItemClose | ItemProgress
    | ItemTextDelta | ItemTextClose | ItemOutputDelta | CommandOutputSnapshot | Usage
    | ContextWindow | ContextCompacted | ContextCleared | TurnDiff | ThreadStarted
    | ThreadIdentity | ThreadName | ExtensionState | ProviderRateLimits | ProviderError
    | ProviderModelFallback | ProviderWarning | Unhandled | SessionEnded | SessionReset
)  # fmt: skip

DELTA_KINDS: tuple[str, ...] = tuple(str(t.__struct_config__.tag) for t in AnyDelta.__args__)


class ThreadDeltaParams(Struct, gc=False):
    """`thread/delta` params; extra top-level keys are tolerated (dropped)."""

    threadId: NonEmpty
    deltas: list[AnyDelta]


class GrammarError(ValueError):
    """A `thread/delta` params object the grammar rejects; the message names path and reason."""


_params_decoder = msgspec.json.Decoder(ThreadDeltaParams, float_hook=js_float)


def decode_params(data: bytes | str) -> ThreadDeltaParams:
    """Validate and normalize `thread/delta` params from JSON text."""
    try:
        params = _params_decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise GrammarError(str(exc)) from None
    if may_hold_separator(data):
        fault = key_part_fault(params)
        if fault is not None:
            raise GrammarError(fault)
    return params


def convert_params(obj: Any) -> ThreadDeltaParams:
    """Validate and normalize already-parsed `thread/delta` params."""
    try:
        params = msgspec.convert(obj, ThreadDeltaParams)
    except msgspec.ValidationError as exc:
        raise GrammarError(str(exc)) from None
    fault = key_part_fault(params)  # parsed strings may hold U+001F as it is
    if fault is not None:
        raise GrammarError(fault)
    return params


def may_hold_separator(text: bytes | str) -> bool:
    """Whether values decoded from this JSON text can hold U+001F: only through a `\\u001f` escape."""
    return ESCAPED_SEPARATOR.search(text.encode() if isinstance(text, str) else text) is not None


def key_part_fault(value: Struct, path: str = "$") -> str | None:
    """msgspec's message for the first key part in `value` holding U+001F (what the pattern would say), or None."""
    for name, is_key_part in _key_part_fields(type(value)):
        field = getattr(value, name)
        if is_key_part:
            if type(field) is str and SEP in field:
                return f"Expected `str` matching regex {KEY_PART_PATTERN!r} - at `{path}.{name}`"
            continue
        nested = enumerate(field) if isinstance(field, list) else ((None, field),)
        for index, item in nested:
            if isinstance(item, Struct):
                where = f"{path}.{name}" if index is None else f"{path}.{name}[{index}]"
                fault = key_part_fault(item, where)
                if fault is not None:
                    return fault
    return None


@functools.cache
def _key_part_fields(kind: type) -> tuple[tuple[str, bool], ...]:
    """A Struct type's fields that are key parts (True) or may hold Structs with key parts (False)."""
    hints = typing.get_type_hints(kind, include_extras=True)
    fields: list[tuple[str, bool]] = []
    for name in getattr(kind, "__struct_fields__", ()):
        if _holds_key_part(hints[name], set()):
            fields.append((name, _is_key_part(hints[name])))
    return tuple(fields)


def _is_key_part(annotation: Any) -> bool:
    """`KeyPart` itself, or `KeyPart | UNSET`."""
    if typing.get_origin(annotation) is Annotated:
        return _KEY_PART in annotation.__metadata__
    return any(_is_key_part(arg) for arg in typing.get_args(annotation) if typing.get_origin(arg) is Annotated)


def _holds_key_part(annotation: Any, seen: set[type]) -> bool:
    if _is_key_part(annotation):
        return True
    if isinstance(annotation, type) and issubclass(annotation, Struct):
        if annotation in seen:
            return False
        seen.add(annotation)
        hints = typing.get_type_hints(annotation, include_extras=True)
        return any(_holds_key_part(hints[name], seen) for name in annotation.__struct_fields__)
    return any(_holds_key_part(arg, seen) for arg in typing.get_args(annotation))
