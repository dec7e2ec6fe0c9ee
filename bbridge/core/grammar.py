"""The `thread/delta` grammar v3 as msgspec types (assembler.md §2).

Decoding into these types *is* validation and normalization: unknown keys are
dropped, known keys come back in schema (field) order, absent optional keys
stay `UNSET` (never `None`, which is JSON null). Opaque JSON (tool args and
results, extension payloads, raw params) is typed `Any` and passes through
untouched. A notification with one bad delta fails as a whole.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

# The grammar is the bridges' vocabulary (`from bbridge.core import grammar as g`, README "Writing a bridge"):
# the scalars and item shapes it is built from are public under its name too (each `X as X` is that API).
from bbridge.core.scalars import KEY_PART_PATTERN as KEY_PART_PATTERN
from bbridge.core.scalars import (
    MAX_SAFE,
    Attach,
    ClientRequestId,
    NonEmpty,
    Number,
    OutputChannel,
    TextChannel,
    Wire,
    js_numbers,
    key_part_fault,
    may_hold_separator,
)
from bbridge.core.scalars import ErrorCategory as ErrorCategory
from bbridge.core.scalars import ExtensionKind as ExtensionKind
from bbridge.core.scalars import ItemStatus as ItemStatus
from bbridge.core.scalars import KeyPart as KeyPart
from bbridge.core.scalars import LimitStatus as LimitStatus
from bbridge.core.scalars import TurnStatus as TurnStatus
from bbridge.core.scalars import js_float as js_float
from bbridge.core.scalars import utf16_len as utf16_len
from bbridge.core.shapes import AgentMessageShape as AgentMessageShape
from bbridge.core.shapes import BackgroundTaskShape as BackgroundTaskShape
from bbridge.core.shapes import CommandShape as CommandShape
from bbridge.core.shapes import CompactionShape as CompactionShape
from bbridge.core.shapes import DelegationShape as DelegationShape
from bbridge.core.shapes import ExtensionShape as ExtensionShape
from bbridge.core.shapes import FileChangeEntry as FileChangeEntry
from bbridge.core.shapes import FileChangeShape as FileChangeShape
from bbridge.core.shapes import FileReadShape as FileReadShape
from bbridge.core.shapes import ImageViewShape as ImageViewShape
from bbridge.core.shapes import ItemShape as ItemShape
from bbridge.core.shapes import PlanShape as PlanShape
from bbridge.core.shapes import PlanStep as PlanStep
from bbridge.core.shapes import PlanStepsShape as PlanStepsShape
from bbridge.core.shapes import ReasoningShape as ReasoningShape
from bbridge.core.shapes import SearchShape as SearchShape
from bbridge.core.shapes import Shape as Shape
from bbridge.core.shapes import TaskUsage as TaskUsage
from bbridge.core.shapes import ToolShape as ToolShape
from bbridge.core.shapes import WebFetchShape as WebFetchShape
from bbridge.core.shapes import WebSearchShape as WebSearchShape
from bbridge.core.shapes import Workflow as Workflow
from bbridge.core.shapes import WorkflowAgent as WorkflowAgent
from bbridge.core.shapes import WorkflowPhase as WorkflowPhase

GRAMMAR_VERSIONS = (3, 3)

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
            js_numbers(self, ("id",))


class NoTurnFallback(Wire, kw_only=True):
    raw: RawEvent
    rawType: str


class ErrorInfo(Wire, kw_only=True):
    category: ErrorCategory
    providerCode: str | None
    httpStatusCode: Number | None

    def __post_init__(self) -> None:
        if type(self.httpStatusCode) is float:
            js_numbers(self, ("httpStatusCode",))


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
            js_numbers(
                self, ("totalTokens", "inputTokens", "cachedInputTokens", "outputTokens", "reasoningOutputTokens")
            )


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
            js_numbers(self, ("exitCode",))
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
            js_numbers(self, ("modelContextWindow",))


class ContextWindow(Delta, tag="contextWindow", kw_only=True):
    used: Number | None
    size: Number | UnsetType | None = UNSET
    estimated: bool
    attach: Attach
    providerTurnId: KeyPart | UnsetType = UNSET

    def __post_init__(self) -> None:
        if float in (type(self.used), type(self.size)):
            js_numbers(self, ("used", "size"))


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
