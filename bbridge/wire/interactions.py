"""Bridge -> runtime request payloads (protocol.md §3.6, §3.7).

`item/tool/call` (a dynamic tool the runtime executes) and
`interaction/request` (an approval or a user question the host resolves):
their params, the approval subjects and grants, the questions. Bridges build
these; the runtime validates them before showing anything to a user. A client
answering an approval with a bare decision gets its full answer from
`approval_answer` (`bbridge respond` and the ACP face both do).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, get_args

from msgspec import UNSET, Meta, UnsetType

from bbridge.core.grammar import Presentation
from bbridge.core.scalars import NonEmpty, Wire

NonBlank = Annotated[str, Meta(pattern=r"\S")]


class ToolCallParams(Wire, kw_only=True):
    """`turnId` is a required key; null means unresolved (the runtime uses the active turn)."""

    providerThreadId: NonEmpty
    threadId: NonEmpty | UnsetType = UNSET
    turnId: NonEmpty | None
    callId: NonEmpty
    tool: NonEmpty
    arguments: Any | UnsetType = UNSET
    providerNativeIds: bool | UnsetType = UNSET


class ContentItem(Wire, tag_field="type", kw_only=True):
    pass


class InputText(ContentItem, tag="inputText", kw_only=True):
    text: str


class InputImage(ContentItem, tag="inputImage", kw_only=True):
    imageUrl: NonEmpty


class ToolCallResult(Wire, kw_only=True):
    success: bool
    contentItems: list[InputText | InputImage]


class NetworkGrant(Wire, kw_only=True, forbid_unknown_fields=True):
    enabled: bool | None


class FileSystemGrant(Wire, kw_only=True, forbid_unknown_fields=True):
    read: list[str]
    write: list[str]


class GrantProfile(Wire, kw_only=True, forbid_unknown_fields=True):
    """Strict: no extra keys."""

    network: NetworkGrant | None
    fileSystem: FileSystemGrant | None


class Action(Wire, tag_field="type", kw_only=True):
    command: str


class ReadAction(Action, tag="read", kw_only=True):
    name: str
    path: str


class ListFilesAction(Action, tag="listFiles", kw_only=True):
    path: str | None


class SearchAction(Action, tag="search", kw_only=True):
    query: str | None
    path: str | None


class UnknownAction(Action, tag="unknown", kw_only=True):
    pass


class Subject(Wire, tag_field="kind", kw_only=True):
    itemId: str


class CommandSubject(Subject, tag="command", kw_only=True):
    command: NonEmpty
    cwd: str | None
    actions: list[ReadAction | ListFilesAction | SearchAction | UnknownAction]
    sessionGrant: GrantProfile | None


class FileChangeSubject(Subject, tag="file_change", kw_only=True):
    writeScope: NonEmpty | None
    sessionGrant: GrantProfile | None


class PermissionGrantSubject(Subject, tag="permission_grant", kw_only=True):
    toolName: str | None
    permissions: GrantProfile


class PlanSubject(Subject, tag="plan", kw_only=True):
    plan: NonEmpty
    planFilePath: NonEmpty | None


class ToolUseSubject(Subject, tag="tool_use", kw_only=True):
    tool: NonEmpty
    presentation: Presentation


Decision = Literal["allow_once", "allow_for_session", "deny"]
DECISIONS: Final[tuple[str, ...]] = get_args(Decision)


class Payload(Wire, tag_field="kind", kw_only=True):
    pass


class ApprovalPayload(Payload, tag="approval", kw_only=True):
    subject: CommandSubject | FileChangeSubject | PermissionGrantSubject | PlanSubject | ToolUseSubject
    reason: str | None
    availableDecisions: Annotated[list[Decision], Meta(min_length=1)]


class QuestionOption(Wire, kw_only=True):
    value: NonBlank
    label: str
    description: str | UnsetType = UNSET


class Question(Wire, kw_only=True):
    """Must allow free text or offer at least one option; option values are unique."""

    id: NonBlank
    prompt: NonBlank
    shortLabel: str | UnsetType = UNSET
    multiSelect: bool
    options: Annotated[list[QuestionOption], Meta(max_length=4)] | UnsetType = UNSET
    allowFreeText: bool

    def __post_init__(self) -> None:
        options = self.options or []
        if not self.allowFreeText and not options:
            raise ValueError("a question must allow free text or offer an option")
        if len({option.value for option in options}) != len(options):
            raise ValueError("option values must be unique")


class UserQuestionPayload(Payload, tag="user_question", kw_only=True):
    questions: Annotated[list[Question], Meta(min_length=1, max_length=4)]

    def __post_init__(self) -> None:
        if len({question.id for question in self.questions}) != len(self.questions):
            raise ValueError("question ids must be unique")


class InteractionRequestParams(Wire, kw_only=True):
    providerThreadId: NonEmpty
    threadId: NonEmpty | UnsetType = UNSET
    turnId: NonEmpty | None
    payload: ApprovalPayload | UserQuestionPayload
    providerNativeIds: bool | UnsetType = UNSET


class NotOffered(ValueError):
    """A decision the approval does not offer; the message names the request and what it offers."""


def approval_answer(request_id: str, payload: dict[str, Any], decision: str) -> dict[str, Any]:
    """The approval answer a bare decision stands for (protocol.md §3.7): an allow grants what the request offers
    (a permission grant's permissions; for the session, a command's or file change's `sessionGrant`).

    `payload` is the request's `ApprovalPayload` as JSON, as `interaction/opened` and `thread/pending` carry it; a
    decision outside its `availableDecisions` (all three when it names none) is a `NotOffered`.
    """
    offered = payload.get("availableDecisions") or list(DECISIONS)
    if decision not in offered:
        raise NotOffered(f"{request_id} does not offer {decision} (it offers {', '.join(offered)})")
    if decision == "deny":
        return {"decision": "deny"}
    subject = payload.get("subject") or {}
    granted = subject.get("permissions") if subject.get("kind") == "permission_grant" else None
    if decision == "allow_for_session" and granted is None:
        granted = subject.get("sessionGrant")
    return {"decision": decision, "grantedPermissions": granted}
