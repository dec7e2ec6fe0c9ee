"""Bridge protocol v2 wire types besides `thread/delta` (protocol.md §2-§3).

Decoding into these types is validation: unknown keys are tolerated (and
dropped), spec defaults apply at parse time, absent optional keys stay
`UNSET`. The daemon forwards client params verbatim as JSON, so these types
validate and document (and generate `bbridge schema`); they are not meant
for re-encoding. Here: the handshake, capability gating, the shared
sub-schemas, the runtime's request params and notifications, and the method
tables. `thread/delta` params live in `bbridge.core.grammar`, maintenance results
and skills in `bbridge.wire.maintenance`, bridge -> runtime request payloads in
`bbridge.wire.interactions`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, NamedTuple, TypeAlias

import msgspec
from msgspec import UNSET, Meta, UnsetType

from bbridge.core import scalars
from bbridge.core.grammar import GRAMMAR_VERSIONS, Presentation, ThreadDeltaParams
from bbridge.core.scalars import ClientRequestId, NonEmpty, PosInt, Wire
from bbridge.wire.interactions import InteractionRequestParams, ToolCallParams, ToolCallResult
from bbridge.wire.maintenance import (
    HealthReport,
    InstallationStatus,
    InstallPlan,
    InstallUnavailable,
    SkillsConfigureParams,
    Unsupported,
    UsageReport,
)

PROTOCOL_VERSION = 2
LEGACY_GRAMMAR_RANGE = (2, 2)  # what an absent `grammarVersions` means, on either side

GrammarRange = tuple[PosInt, PosInt]
NonNegInt = Annotated[int, Meta(ge=0)]
Fork = Literal["none", "tip", "checkpoint"]
ReasoningLevel = Literal["none", "low", "medium", "high", "xhigh", "ultracode", "max", "ultra"]
JsonObject = dict[str, Any]


def _check_range(value: GrammarRange | UnsetType) -> None:
    if value is not UNSET and value[0] > value[1]:
        raise ValueError("grammar range must be [min, max] with min <= max")


# -- handshake (§2) ----------------------------------------------------------


class ClientInfo(Wire, kw_only=True):
    name: NonEmpty
    version: NonEmpty


class InitializeParams(Wire, kw_only=True):
    """`initialize` params; a bridge reads an absent `grammarVersions` as [2, 2]."""

    protocolVersion: PosInt
    client: ClientInfo
    grammarVersions: GrammarRange | UnsetType = UNSET

    def __post_init__(self) -> None:
        _check_range(self.grammarVersions)


class Capabilities(Wire, kw_only=True):
    """Handshake capabilities; each defaults independently and an absent one is a definite "no"."""

    sessionRestore: bool = False
    threadArchive: bool = False
    threadRename: bool = False
    threadGoalClear: bool = False
    fork: Fork = "none"
    approvalEnforcedBy: Literal["runtime", "provider"] = "runtime"
    grammarVersions: GrammarRange = LEGACY_GRAMMAR_RANGE
    steerMode: Literal["inject", "queue"] = "queue"

    def __post_init__(self) -> None:
        _check_range(self.grammarVersions)


class InitializeResult(Wire, kw_only=True):
    """`initialize` result; missing or null `capabilities` reads as all defaults."""

    protocolVersion: PosInt
    capabilities: Capabilities | UnsetType | None = UNSET


class HandshakeRefused(ValueError):
    """The bridge's `initialize` result refuses a handshake; the message is the legible startup error."""


def negotiate(runtime: tuple[int, int], bridge: tuple[int, int]) -> int | None:
    """The highest grammar version both ranges contain, or None when they do not overlap."""
    lo, hi = max(runtime[0], bridge[0]), min(runtime[1], bridge[1])
    return hi if lo <= hi else None


_AT = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]|\[\.\.\.\]")


def first_issue(exc: msgspec.ValidationError | msgspec.DecodeError) -> tuple[list[str | int], str]:
    """A msgspec error as a zod-like issue: path (`*` for an unnamed dict key) and message.

    msgspec stops at the first issue, so there is exactly one.
    """
    match = _AT.match(str(exc))
    assert match is not None  # the pattern matches any text
    path: list[str | int] = [
        name if name else int(index) if index else "*" for name, index in _STEP.findall(match["path"] or "")
    ]
    return path, match["message"]


def issue_text(exc: msgspec.ValidationError | msgspec.DecodeError) -> str:
    """The issue as `path.joined.by.dots: message` (just the message at the root)."""
    path, message = first_issue(exc)
    return f"{'.'.join(map(str, path))}: {message}" if path else message


def check_initialize(provider_id: str, raw: bytes, runtime: tuple[int, int] = GRAMMAR_VERSIONS) -> Capabilities:
    """Run the §2.4 checks, in order, on an `initialize` result's JSON; the capabilities on success."""
    try:
        result = msgspec.json.decode(raw, type=InitializeResult)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise HandshakeRefused(
            f'Provider bridge "{provider_id}" answered initialize with a malformed result ({issue_text(exc)}). '
            f'The bridge and this runtime cannot negotiate a handshake; update or fix the "{provider_id}" provider plugin.'
        ) from None
    if result.protocolVersion != PROTOCOL_VERSION:
        raise HandshakeRefused(
            f'Provider bridge "{provider_id}" speaks Provider Bridge Protocol version {result.protocolVersion}, '
            f'but this runtime requires version {PROTOCOL_VERSION}. Update the "{provider_id}" provider plugin '
            f"to a build published for protocol version {PROTOCOL_VERSION}."
        )
    caps = result.capabilities if isinstance(result.capabilities, Capabilities) else Capabilities()
    (bmin, bmax), (rmin, rmax) = caps.grammarVersions, runtime
    if negotiate(runtime, caps.grammarVersions) is None:
        raise HandshakeRefused(
            f'Provider bridge "{provider_id}" speaks thread/delta grammar versions {bmin}-{bmax}, but this runtime '
            f'assembles versions {rmin}-{rmax}. Update the "{provider_id}" provider plugin or bb so the two ranges overlap.'
        )
    return caps


# -- capability gating (§2.5) ------------------------------------------------

METHOD_CAPABILITY: dict[str, str] = {
    "thread/name/set": "threadRename",
    "thread/archive": "threadArchive",
    "thread/unarchive": "threadArchive",
    "thread/goal/clear": "threadGoalClear",
    "thread/fork": "fork",
}


def method_allowed(method: str, caps: Capabilities, *, checkpoint: bool = False) -> str | None:
    """Why the handshake forbids sending `method` (a fork `checkpoint` needs fork "checkpoint"), or None."""
    capability = METHOD_CAPABILITY.get(method)
    if capability is None:
        return None
    if capability == "fork":
        if caps.fork == "none":
            return "fork not advertised"
        if checkpoint and caps.fork == "tip":
            return 'checkpoint fork not advertised (fork is "tip")'
        return None
    return None if getattr(caps, capability) is True else f"{capability} not advertised"


# -- shared sub-schemas (§3.2) -----------------------------------------------


class Resource(Wire, tag_field="kind", kw_only=True):
    pass


class ThreadResource(Resource, tag="thread", kw_only=True):
    threadId: str
    projectId: str | UnsetType = UNSET
    label: str


class ProjectResource(Resource, tag="project", kw_only=True):
    projectId: str
    label: str


class SectionResource(Resource, tag="section", kw_only=True):
    sectionId: str
    label: str


class FolderResource(Resource, tag="folder", kw_only=True):
    """Legacy spelling of a section mention."""

    folderId: str


class PathResource(Resource, tag="path", kw_only=True):
    source: Literal["workspace", "thread-storage"]
    entryKind: Literal["file", "directory"]
    path: str
    label: str


class CommandResource(Resource, tag="command", kw_only=True):
    trigger: Literal["/"]
    name: str
    source: Literal["skill", "command"]
    origin: Literal["builtin", "project", "user"]
    label: str
    argumentHint: str | None


class PluginResource(Resource, tag="plugin", kw_only=True):
    pluginId: str
    icon: str | UnsetType | None = UNSET
    itemId: str
    label: str


MentionResource: TypeAlias = (
    ThreadResource | ProjectResource | SectionResource | FolderResource | PathResource | CommandResource
    | PluginResource
)  # fmt: skip


class PromptTextMention(Wire, kw_only=True):
    start: NonNegInt
    end: NonNegInt
    resource: MentionResource


class Input(Wire, tag_field="type", kw_only=True):
    visibility: Literal["agent-only"] | UnsetType = UNSET


class TextInput(Input, tag="text", kw_only=True):
    text: str
    mentions: list[PromptTextMention] = msgspec.field(default_factory=list)


class ImageInput(Input, tag="image", kw_only=True):
    url: str


class LocalImageInput(Input, tag="localImage", kw_only=True):
    path: str


class LocalFileInput(Input, tag="localFile", kw_only=True):
    path: str
    name: str | UnsetType = UNSET
    sizeBytes: NonNegInt | UnsetType = UNSET
    mimeType: str | UnsetType = UNSET


PromptInput: TypeAlias = TextInput | ImageInput | LocalImageInput | LocalFileInput


class DynamicTool(Wire, kw_only=True):
    name: str
    description: str
    inputSchema: Any
    presentation: Presentation | UnsetType = UNSET


class Options(Wire, tag_field="permissionMode", kw_only=True):
    """Execution options; the permission policy is one of three exact combinations (the tag)."""

    model: NonEmpty | UnsetType = UNSET
    serviceTier: Literal["fast", "default"] | UnsetType = UNSET
    reasoningLevel: ReasoningLevel | UnsetType = UNSET
    promptMode: Literal["plan"] | UnsetType = UNSET
    instructions: str | UnsetType = UNSET
    envVars: dict[str, str] | UnsetType = UNSET
    providerOptions: JsonObject | UnsetType = UNSET


class AcceptEditsOptions(Options, tag="accept-edits", kw_only=True):
    permissionScope: Literal["workspace"]
    approvalReviewer: Literal["user"]
    permissionEscalation: Literal["ask", "deny"]


class AutoOptions(Options, tag="auto", kw_only=True):
    permissionScope: Literal["workspace"]
    approvalReviewer: Literal["automatic"]
    permissionEscalation: Literal["ask", "deny"]


class FullOptions(Options, tag="full", kw_only=True):
    permissionScope: Literal["full"]
    approvalReviewer: None
    permissionEscalation: None


ExecutionOptions: TypeAlias = AcceptEditsOptions | AutoOptions | FullOptions

# -- runtime -> bridge requests (§3.1, §3.3) ---------------------------------


class ThreadRefParams(Wire, kw_only=True):
    """`thread/discard`, `thread/archive`, `thread/unarchive`, `thread/goal/clear`."""

    threadId: NonEmpty
    providerThreadId: NonEmpty


class ThreadNameSetParams(ThreadRefParams, kw_only=True):
    title: NonEmpty


class GoalClearResult(Wire, kw_only=True, forbid_unknown_fields=True):
    """Strict: exactly `{cleared}`."""

    cleared: bool


class ThreadStartParams(Wire, kw_only=True):
    """Session construction; the runtime never sends `input` but bridges should accept it."""

    threadId: NonEmpty
    cwd: NonEmpty
    options: ExecutionOptions
    dynamicTools: list[DynamicTool] | UnsetType = UNSET
    disallowedTools: list[NonEmpty] | UnsetType = UNSET
    instructionMode: Literal["append", "replace"] = "append"
    input: list[PromptInput] | UnsetType = UNSET


class ThreadResumeParams(ThreadStartParams, kw_only=True):
    providerThreadId: NonEmpty


class ThreadForkParams(ThreadStartParams, kw_only=True):
    """Absent `sourceProviderCheckpointId` forks at the tip."""

    sourceProviderThreadId: NonEmpty
    sourceProviderCheckpointId: NonEmpty | UnsetType = UNSET


class ThreadIdentityResult(Wire, kw_only=True):
    """The protocol's start/resume/fork result; the runtime reads it leniently (`resolve_provider_thread_id`)."""

    providerThreadId: NonEmpty
    sessionRestorable: bool | UnsetType = UNSET


def resolve_provider_thread_id(result: object, thread_id: str) -> str | None:
    """§3.2 lenient identity: `providerThreadId`, else `thread.id`, else a `threadId` other than bb's own."""
    if not isinstance(result, dict):
        return None
    thread = result.get("thread")
    for candidate in (result.get("providerThreadId"), thread.get("id") if isinstance(thread, dict) else None):
        if isinstance(candidate, str) and candidate:
            return candidate
    other = result.get("threadId")
    return other if isinstance(other, str) and other and other != thread_id else None


class TurnStartParams(Wire, kw_only=True):
    threadId: NonEmpty
    providerThreadId: NonEmpty
    input: list[PromptInput]
    clientRequestId: ClientRequestId
    options: ExecutionOptions


class TurnSteerParams(TurnStartParams, kw_only=True):
    expectedTurnId: NonEmpty


class ThreadStopParams(Wire, kw_only=True):
    threadId: NonEmpty
    providerThreadId: NonEmpty
    intent: Literal["interrupt", "release"]
    activeTurnId: NonEmpty | None


class ThreadStopResult(Wire, kw_only=True):
    providerCheckpointId: NonEmpty | UnsetType | None = UNSET


class ModelListParams(Wire, kw_only=True):
    cwd: NonEmpty | UnsetType = UNSET
    providerOptions: JsonObject | UnsetType = UNSET


class ReasoningEffort(Wire, kw_only=True):
    reasoningEffort: ReasoningLevel
    description: str


class AvailableModel(Wire, kw_only=True):
    id: str
    model: str
    displayName: str
    routeProviderId: NonEmpty | UnsetType = UNSET
    description: str
    supportedReasoningEfforts: list[ReasoningEffort]
    defaultReasoningEffort: ReasoningLevel
    isDefault: bool


class ModelListResult(Wire, kw_only=True):
    models: list[AvailableModel]
    selectedOnlyModels: list[AvailableModel] = msgspec.field(default_factory=list)


class MaintenanceParams(Wire, kw_only=True):
    """`provider/health`, `provider/usage`; `providerId` lets one bridge serve several providers."""

    providerId: NonEmpty
    cwd: NonEmpty | UnsetType = UNSET
    providerOptions: JsonObject | UnsetType = UNSET


class InstallationStatusParams(MaintenanceParams, kw_only=True):
    requirement: Literal["thread_rewind"] | UnsetType = UNSET


class InstallationRunParams(MaintenanceParams, kw_only=True):
    action: Literal["install", "update"]


# -- bridge -> runtime notifications (§3.5) ----------------------------------


class ThreadIdentityParams(Wire, kw_only=True):
    threadId: NonEmpty
    providerThreadId: NonEmpty
    sessionRestorable: bool | UnsetType = UNSET


class SessionReplacedParams(Wire, kw_only=True):
    threadId: NonEmpty
    providerThreadId: NonEmpty | None
    reason: NonEmpty
    contextLost: bool = False


class ProviderRecoveryParams(Wire, kw_only=True):
    """Absent `threadId` means a provider-wide condition."""

    threadId: NonEmpty | UnsetType = UNSET
    kind: Literal["sessionArchived", "authRequired", "restartRecommended", "staleTurn", "rateLimited"]
    message: NonEmpty
    retryable: bool


class ProviderRawParams(Wire, kw_only=True):
    threadId: NonEmpty | UnsetType = UNSET
    coverage: Literal["noise", "unknown"]
    payload: Any | UnsetType = UNSET


class ErrorParams(Wire, kw_only=True):
    """The runtime surfaces it only when both `threadId` and `providerThreadId` are present (§11.6)."""

    threadId: NonEmpty | UnsetType = UNSET
    providerThreadId: NonEmpty | UnsetType = UNSET
    message: NonEmpty


# -- method tables -----------------------------------------------------------


class Method(NamedTuple):
    """A method's params type and its result alternatives (tried in order; empty when the result is ignored)."""

    params: Any
    results: tuple[Any, ...] = ()


# Runtime -> bridge requests: the 18 `BRIDGE_REQUEST_METHODS` (`initialize` included).
RUNTIME_REQUESTS: dict[str, Method] = {
    "initialize": Method(InitializeParams, (InitializeResult,)),
    "skills/configure": Method(SkillsConfigureParams),
    "model/list": Method(ModelListParams, (ModelListResult,)),
    "provider/health": Method(MaintenanceParams, (Unsupported, HealthReport)),
    "provider/usage": Method(MaintenanceParams, (Unsupported, UsageReport)),
    "provider/installation/status": Method(InstallationStatusParams, (InstallationStatus,)),
    "provider/installation/run": Method(InstallationRunParams, (InstallUnavailable, InstallPlan)),
    "thread/start": Method(ThreadStartParams, (ThreadIdentityResult,)),
    "thread/resume": Method(ThreadResumeParams, (ThreadIdentityResult,)),
    "thread/fork": Method(ThreadForkParams, (ThreadIdentityResult,)),
    "turn/start": Method(TurnStartParams),
    "turn/steer": Method(TurnSteerParams),
    "thread/stop": Method(ThreadStopParams, (ThreadStopResult,)),
    "thread/discard": Method(ThreadRefParams),
    "thread/name/set": Method(ThreadNameSetParams),
    "thread/archive": Method(ThreadRefParams),
    "thread/unarchive": Method(ThreadRefParams),
    "thread/goal/clear": Method(ThreadRefParams, (GoalClearResult,)),
}

# Bridge -> runtime notifications (never answered; unknown ones are ignored).
BRIDGE_NOTIFICATIONS: dict[str, Method] = {
    "thread/delta": Method(ThreadDeltaParams),
    "thread/identity": Method(ThreadIdentityParams),
    "session/replaced": Method(SessionReplacedParams),
    "provider/recovery": Method(ProviderRecoveryParams),
    "provider/raw": Method(ProviderRawParams),
    "error": Method(ErrorParams),
}

# Bridge -> runtime requests and what the runtime answers (§3.4).
BRIDGE_REQUESTS: dict[str, Method] = {
    "item/tool/call": Method(ToolCallParams, (ToolCallResult,)),
    "interaction/request": Method(InteractionRequestParams),  # answered with the host's resolution, verbatim
}


class InvalidParams(ValueError):
    """Params that fail their method's schema; `issues` is the -32602 `data` (`[{path, message}]`)."""

    def __init__(self, method: str, exc: msgspec.ValidationError | msgspec.DecodeError) -> None:
        super().__init__(f"Invalid params for {method}")
        path, message = first_issue(exc)
        self.issues: list[dict[str, Any]] = [{"path": path, "message": message}]


METHODS: dict[str, Method] = RUNTIME_REQUESTS | BRIDGE_NOTIFICATIONS | BRIDGE_REQUESTS


def decode_method_params(method: str, data: bytes | str) -> Any:
    """Validate a known method's params JSON into its type (KeyError for a method `METHODS` lacks)."""
    try:
        value = msgspec.json.decode(data, type=METHODS[method].params)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidParams(method, exc) from None
    if isinstance(value, msgspec.Struct) and scalars.may_hold_separator(data):
        fault = scalars.key_part_fault(value)
        if fault is not None:
            raise InvalidParams(method, msgspec.ValidationError(fault))
    return value


def decode_method_result(method: str, data: bytes | str) -> Any:
    """Validate a result JSON against the method's alternatives, else `ValueError("Invalid JSON-RPC result for …")`."""
    spec = METHODS[method]
    for alternative in spec.results:
        try:
            return msgspec.json.decode(data, type=alternative)
        except (msgspec.ValidationError, msgspec.DecodeError):
            continue
    if not spec.results:
        return msgspec.json.decode(data)
    raise ValueError(f"Invalid JSON-RPC result for {method}")
