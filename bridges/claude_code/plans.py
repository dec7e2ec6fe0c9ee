"""Plan snapshots from `TodoWrite` and the task-list tools (spec §4.6.3).

`TodoWrite` carries the whole list in its input; the task-list tools (`TaskCreate`, `TaskUpdate`, `TaskList`,
`TaskGet`) change one task at a time, so their results are folded into a list kept per translator and each
change is shown as a fresh `planSteps` snapshot.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Literal

from msgspec import UNSET

from bbridge.core import grammar as g
from bbridge.core import js
from bridges.claude_code import presentation as p

TASK_TOOLS = frozenset({"TaskCreate", "TaskUpdate", "TaskList", "TaskGet"})
StepStatus = Literal["pending", "active", "completed"]
_TODO_STATUS: dict[str, StepStatus] = {"pending": "pending", "in_progress": "active", "completed": "completed"}
_TASK_STATUSES = frozenset({"pending", "in_progress", "completed"})


def snapshot(steps: list[g.PlanStep], parent_ref: str | None) -> g.ItemClose:
    """A settled `planSteps` item; its channel key mints a fresh item every time."""
    return g.ItemClose(
        key=g.ItemKey(channel="planSteps", parentRef=UNSET if parent_ref is None else parent_ref),
        status="completed",
        item=g.PlanStepsShape(steps=steps),
        presentation=p.plan_snapshot(steps),
    )


def todo_steps(tool_input: Any) -> list[g.PlanStep] | None:
    """`TodoWrite`'s todos as steps; None when they do not parse."""
    todos = tool_input.get("todos") if isinstance(tool_input, dict) else None
    if not isinstance(todos, list):
        return None
    for todo in todos:
        if not isinstance(todo, dict) or not isinstance(todo.get("content"), str):
            return None
        if not isinstance(todo.get("status"), str) or not isinstance(todo.get("activeForm", ""), str):
            return None
    steps: list[g.PlanStep] = []
    for todo in todos:
        status = _TODO_STATUS.get(todo["status"])
        if status is None:
            continue
        active_form = todo.get("activeForm")
        text = js.trim(active_form if status == "active" and active_form is not None else todo["content"])
        if text:
            steps.append(g.PlanStep(step=text, status=status))
    return steps


@dataclass(slots=True)
class _Task:
    subject: str
    active_form: str | None
    status: str


def _trimmed(value: Any) -> str | None:
    return js.trim(value) if isinstance(value, str) else None


class TaskPlan:
    """The task-list tools' tasks, in insertion order."""

    def __init__(self) -> None:
        self.tasks: dict[str, _Task] = {}

    def steps(self) -> list[g.PlanStep]:
        steps: list[g.PlanStep] = []
        for task in self.tasks.values():
            text = task.active_form if task.status == "in_progress" and task.active_form else task.subject
            if text:
                steps.append(g.PlanStep(step=text, status=_TODO_STATUS[task.status]))
        return steps

    def fold(self, tool: str, tool_input: Any, output: Any) -> bool:
        """Apply one successful task-list result; True when the list changed."""
        if isinstance(output, str):
            with contextlib.suppress(ValueError):
                output = js.parse(output)
        i = tool_input if isinstance(tool_input, dict) else {}
        o = output if isinstance(output, dict) else {}
        if tool == "TaskCreate":
            return self._create(i, o)
        if tool == "TaskUpdate":
            return self._update(i, o)
        if tool == "TaskList":
            return self._list(o)
        if tool == "TaskGet":
            return self._get(i, o)
        return False

    def _create(self, i: dict[str, Any], o: dict[str, Any]) -> bool:
        task = o.get("task")
        if not isinstance(i.get("subject"), str) or not isinstance(i.get("activeForm", ""), str):
            return False
        if (
            not isinstance(task, dict)
            or not isinstance(task.get("id"), str)
            or not isinstance(task.get("subject"), str)
        ):
            return False
        subject = js.trim(i["subject"]) or js.trim(task["subject"])
        self.tasks[task["id"]] = _Task(subject, _trimmed(i.get("activeForm")) or None, "pending")
        return True

    def _update(self, i: dict[str, Any], o: dict[str, Any]) -> bool:
        task_id, status = i.get("taskId"), i.get("status")
        if not isinstance(task_id, str) or o.get("success") is not True or not isinstance(o.get("taskId"), str):
            return False
        if status is not None and status not in (*_TASK_STATUSES, "deleted"):
            return False
        if not isinstance(i.get("subject", ""), str) or not isinstance(i.get("activeForm", ""), str):
            return False
        if status == "deleted":
            return self.tasks.pop(task_id, None) is not None
        old = self.tasks.get(task_id)
        if old is None:
            return False
        subject = _trimmed(i.get("subject"))
        new = _Task(
            subject or old.subject,
            (_trimmed(i["activeForm"]) or None) if "activeForm" in i else old.active_form,
            status if isinstance(status, str) else old.status,
        )
        self.tasks[task_id] = new
        return new != old

    def _list(self, o: dict[str, Any]) -> bool:
        listed = o.get("tasks")
        if not isinstance(listed, list):
            return False
        self.tasks = {}
        for entry in listed:
            if not isinstance(entry, dict) or entry.get("status") not in _TASK_STATUSES:
                continue
            if isinstance(entry.get("id"), str) and isinstance(entry.get("subject"), str):
                self.tasks[entry["id"]] = _Task(js.trim(entry["subject"]), None, entry["status"])
        return True

    def _get(self, i: dict[str, Any], o: dict[str, Any]) -> bool:
        task_id = i.get("taskId")
        if not isinstance(task_id, str) or "task" not in o:
            return False
        task = o["task"]
        if task is None:
            return self.tasks.pop(task_id, None) is not None
        if not isinstance(task, dict) or task.get("status") not in _TASK_STATUSES:
            return False
        if not isinstance(task.get("id"), str) or not isinstance(task.get("subject"), str):
            return False
        old = self.tasks.get(task["id"])
        new = _Task(js.trim(task["subject"]), None if old is None else old.active_form, task["status"])
        self.tasks[task["id"]] = new
        return new != old
