"""The item shapes an `item.open`/`item.close` carries, tagged on "type", and the sub-schemas only they hold.

Part of the grammar (assembler.md §2): `grammar` names every shape for the bridges (`g.CommandShape`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from msgspec import UNSET, Meta, UnsetType

from bbridge.core.scalars import ExtensionKind, ItemStatus, KeyPart, NonEmpty, Number, PosInt, Wire, js_numbers


class PlanStep(Wire, kw_only=True):
    step: str
    status: Literal["pending", "active", "completed", "failed"] | UnsetType = UNSET


class TaskUsage(Wire, kw_only=True):
    totalTokens: Number
    toolUses: Number
    durationMs: Number

    def __post_init__(self) -> None:
        if float in (type(self.totalTokens), type(self.toolUses), type(self.durationMs)):
            js_numbers(self, ("totalTokens", "toolUses", "durationMs"))


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
            js_numbers(self, ("lastProgressAt", "queuedAt", "startedAt", "tokens", "toolCalls", "durationMs"))


class Workflow(Wire, kw_only=True):
    phases: list[WorkflowPhase]
    agents: list[WorkflowAgent]


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
            js_numbers(self, ("exitCode", "durationMs"))


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
            js_numbers(self, ("durationMs",))


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
