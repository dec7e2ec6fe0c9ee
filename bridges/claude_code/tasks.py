"""Background tasks (the CLI's `task_*` system messages) as `backgroundTask` items (spec §4.9).

Every task delta re-embeds the whole snapshot, so the translator keeps each task's state here; a running
subagent keeps its turn open across SDK loop segments (`blocking`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from msgspec import UNSET

from bbridge.core import grammar as g
from bbridge.core import js
from bridges.claude_code import presentation as p

MATERIALIZED = frozenset({"local_workflow", "local_bash", "local_agent", "local_subagent"})
AGENT_TYPES = frozenset({"local_agent", "local_subagent"})
TaskStatus = Literal["pending", "running", "paused", "completed", "failed", "killed", "stopped"]
PATCH_STATUSES = frozenset({"pending", "running", "completed", "failed", "killed", "paused"})
FINAL_STATUSES = frozenset({"completed", "failed", "stopped"})
_ITEM_STATUS: dict[str, g.ItemStatus] = {
    "pending": "pending",
    "running": "pending",
    "paused": "pending",
    "completed": "completed",
    "failed": "failed",
    "killed": "failed",
    "stopped": "interrupted",
}


def _optional_strings(message: dict[str, Any], *names: str) -> bool:
    return all(isinstance(message[n], str) for n in names if n in message)


def _positive_int(value: Any) -> bool:
    return js.is_number(value) and value > 0 and float(value).is_integer()


@dataclass(slots=True)
class Task:
    task_id: str
    tool_use_id: str | None
    task_type: str
    generation: int
    description: str
    skip_transcript: bool
    workflow_name: str | None
    status: TaskStatus = "running"
    phases: dict[int, g.WorkflowPhase] = field(default_factory=dict)
    agents: dict[int, g.WorkflowAgent] = field(default_factory=dict)
    usage: g.TaskUsage | None = None
    summary: str | None = None
    error: str | None = None
    output_file: str | None = None
    terminal: bool = False

    @property
    def key(self) -> g.ItemKey:
        suffix = f"#{self.generation}" if self.generation > 1 else ""
        parent = UNSET if self.tool_use_id is None else self.tool_use_id
        return g.ItemKey(providerItemId=f"task:{self.task_id}{suffix}", parentRef=parent)

    @property
    def blocking(self) -> bool:
        """A live subagent withholds its turn's boundary (§4.7 step 6)."""
        return self.task_type in AGENT_TYPES and not self.terminal and not self.skip_transcript

    def snapshot(self) -> g.BackgroundTaskShape:
        workflow: g.Workflow | Any = UNSET
        if self.phases or self.agents:
            workflow = g.Workflow(
                phases=[self.phases[i] for i in sorted(self.phases)],
                agents=[self.agents[i] for i in sorted(self.agents)],
            )
        return g.BackgroundTaskShape(
            familyId=self.task_id,
            taskType=self.task_type,
            description=self.description,
            status=_ITEM_STATUS[self.status],
            taskStatus=self.status,
            skipTranscript=self.skip_transcript,
            workflowName=UNSET if self.workflow_name is None else self.workflow_name,
            workflow=workflow,
            usage=UNSET if self.usage is None else self.usage,
            summary=UNSET if self.summary is None else self.summary,
            error=UNSET if self.error is None else self.error,
            outputFile=UNSET if self.output_file is None else self.output_file,
        )

    def presentation(self) -> g.Presentation:
        return p.task(self.task_type, self.description, self.workflow_name)

    def progress(self, flush: bool = False) -> g.ItemProgress:
        return g.ItemProgress(key=self.key, snapshot=self.snapshot(), flush=True if flush else UNSET)

    def close(self) -> g.ItemClose:
        snapshot = self.snapshot()
        return g.ItemClose(key=self.key, status=snapshot.status, item=snapshot, presentation=self.presentation())

    def fold(self, progress: list[Any]) -> None:
        """Apply `workflow_progress` elements: agents and phases replaced by index."""
        for element in progress:
            if not isinstance(element, dict):
                continue
            if element.get("type") == "workflow_agent" and _positive_int(element.get("index")):
                agent = _workflow_agent(element)
                if agent is not None:
                    self.agents[agent.index] = agent
            elif element.get("type") == "workflow_phase" and _workflow_phase(element):
                kind = element.get("kind")
                phase = g.WorkflowPhase(
                    index=int(element["index"]), title=element["title"], kind=kind if isinstance(kind, str) else UNSET
                )
                self.phases[phase.index] = phase


def _workflow_phase(e: dict[str, Any]) -> bool:
    return _positive_int(e.get("index")) and isinstance(e.get("title"), str)


_AGENT_STRINGS = (
    "phaseTitle",
    "agentType",
    "isolation",
    "lastToolName",
    "lastToolSummary",
    "promptPreview",
    "resultPreview",
    "error",
)
_AGENT_NUMBERS = ("queuedAt", "startedAt", "tokens", "toolCalls", "durationMs")


def _workflow_agent(e: dict[str, Any]) -> g.WorkflowAgent | None:
    if not isinstance(e.get("label"), str) or not isinstance(e.get("state"), str):
        return None
    state = e["state"]
    started, queued = e.get("startedAt"), e.get("queuedAt")
    if state == "done":
        mapped: Any = "done"
    elif state == "error":
        mapped = "skipped" if e.get("skipped") is True else "failed"
    else:
        mapped = "queued" if started is None and queued is not None else "running"
    last = next((v for v in (e.get("lastProgressAt"), started, queued) if v is not None), 0)
    extras: dict[str, Any] = {n: e[n] for n in _AGENT_STRINGS if isinstance(e.get(n), str)}
    extras.update({n: e[n] for n in _AGENT_NUMBERS if js.is_number(e.get(n))})
    return g.WorkflowAgent(
        index=int(e["index"]),
        label=e["label"],
        state=mapped,
        model=e["model"] if isinstance(e.get("model"), str) else "unknown",
        attempt=int(e["attempt"]) if _positive_int(e.get("attempt")) else 1,
        cached=e["cached"] if isinstance(e.get("cached"), bool) else False,
        lastProgressAt=last,
        phaseIndex=int(e["phaseIndex"]) if _positive_int(e.get("phaseIndex")) else UNSET,
        **extras,
    )


def task_usage(value: Any) -> g.TaskUsage | None:
    if not isinstance(value, dict):
        return None
    names = ("total_tokens", "tool_uses", "duration_ms")
    if not all(js.is_number(value.get(n)) for n in names):
        return None
    return g.TaskUsage(totalTokens=value[names[0]], toolUses=value[names[1]], durationMs=value[names[2]])


class Tasks:
    """The translator's background tasks by id, in insertion order (the drain closes them in that order)."""

    def __init__(self) -> None:
        self.by_id: dict[str, Task] = {}

    @property
    def blocking(self) -> bool:
        return any(task.blocking for task in self.by_id.values())

    def started(self, m: dict[str, Any], suppressed: bool) -> list[g.Delta]:
        if not isinstance(m.get("task_id"), str) or not isinstance(m.get("description"), str):
            return []
        if not _optional_strings(m, "tool_use_id", "task_type", "workflow_name", "subagent_type", "prompt"):
            return []
        if "skip_transcript" in m and not isinstance(m["skip_transcript"], bool):
            return []
        task_type = m.get("task_type", "unknown")
        known = self.by_id.get(m["task_id"])
        if task_type not in MATERIALIZED or (known is not None and not known.terminal) or suppressed:
            return []
        task = Task(
            task_id=m["task_id"],
            tool_use_id=m.get("tool_use_id"),
            task_type=task_type,
            generation=1 if known is None else known.generation + 1,
            description=m["description"],
            skip_transcript=m.get("skip_transcript") is True,
            workflow_name=m.get("workflow_name"),
        )
        self.by_id.pop(task.task_id, None)
        self.by_id[task.task_id] = task
        return [g.TurnOpen(), g.ItemOpen(key=task.key, item=task.snapshot(), presentation=task.presentation())]

    def _live(self, m: dict[str, Any]) -> Task | None:
        task = self.by_id.get(m["task_id"]) if isinstance(m.get("task_id"), str) else None
        return None if task is None or task.terminal else task

    def progress(self, m: dict[str, Any]) -> list[g.Delta]:
        usage = task_usage(m.get("usage"))
        progress = m.get("workflow_progress", [])
        if not isinstance(m.get("description"), str) or usage is None or not isinstance(progress, list):
            return []
        task = self._live(m)
        if task is None:
            return []
        task.fold(progress)
        task.usage = usage
        return [task.progress()]

    def updated(self, m: dict[str, Any]) -> list[g.Delta]:
        patch = m.get("patch")
        if not isinstance(patch, dict) or not _optional_strings(patch, "description", "error"):
            return []
        if "status" in patch and patch["status"] not in PATCH_STATUSES:
            return []
        task = self._live(m)
        if task is None:
            return []
        changed = "status" in patch and patch["status"] != task.status
        if "status" in patch:
            task.status = patch["status"]
        if "description" in patch:
            task.description = patch["description"]
        if "error" in patch:
            task.error = patch["error"]
        return [task.progress(flush=changed)]

    def notification(self, m: dict[str, Any]) -> list[g.Delta]:
        if m.get("status") not in FINAL_STATUSES or not isinstance(m.get("summary"), str):
            return []
        if not isinstance(m.get("output_file"), str):
            return []
        usage = task_usage(m.get("usage"))
        if "usage" in m and usage is None:
            return []
        task = self._live(m)
        if task is None:
            return []
        task.status = m["status"]
        task.summary = m["summary"]
        if m["output_file"]:
            task.output_file = m["output_file"]
        if usage is not None:
            task.usage = usage
        task.terminal = True
        return [task.close()]

    def drain(self) -> list[g.Delta]:
        """A dying session's tasks: unfinished ones stop; each closes (§4.9 drain)."""
        closes: list[g.Delta] = []
        for task in self.by_id.values():
            if task.terminal:
                continue
            if task.status in ("pending", "running", "paused"):
                task.status = "stopped"
            task.terminal = True
            closes.append(task.close())
        return closes
