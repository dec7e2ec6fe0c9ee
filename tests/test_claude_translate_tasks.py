"""The Claude Code translator's background tasks (spec §4.9) and plans (§4.6.3): task families and
generations, workflow progress, todo and task-list snapshots.
"""

from __future__ import annotations

import json
from typing import Any

from bridges.claude_code import plans
from tests.claude_messages import kinds, out, result, tool_result, tool_use, turn

# -- background tasks (§4.9) ---------------------------------------------------------------


def task_started(task_id: str = "t1", task_type: str = "local_agent", **extra: Any) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "task_started",
        "task_id": task_id,
        "description": "Do it",
        "task_type": task_type,
        **extra,
    }


def test_a_running_subagent_withholds_the_boundary_and_drains_as_stopped() -> None:
    t = turn()
    assert kinds(t.message(task_started(tool_use_id="toolu_a"))) == ["turn.open", "item.open"]
    assert kinds(t.message(result())) == ["turn.open", "contextWindow"]
    assert t.turn_open
    settled = out(t.settlement())
    assert [d["kind"] for d in settled] == ["session.ended", "item.close"]
    assert settled[1]["key"] == {"providerItemId": "task:t1", "parentRef": "toolu_a"}
    assert (settled[1]["status"], settled[1]["item"]["taskStatus"]) == ("interrupted", "stopped")


def test_unmaterialized_and_duplicate_task_starts_are_ignored() -> None:
    t = turn()
    assert t.message(task_started(task_type="remote_agent")) == []
    t.message(task_started())
    assert t.message(task_started()) == []


def test_restarted_task_gets_a_new_generation() -> None:
    t = turn()
    t.message(task_started(task_type="local_bash"))
    done = {
        "type": "system",
        "subtype": "task_notification",
        "task_id": "t1",
        "status": "failed",
        "output_file": "",
        "summary": "s",
    }
    closed = out(t.message(done))[0]
    assert closed["status"] == "failed" and "outputFile" not in closed["item"]
    assert closed["presentation"]["label"]["pending"] == "Running background command"
    reopened = out(t.message(task_started(task_type="local_bash")))[1]
    assert reopened["key"] == {"providerItemId": "task:t1#2"}


def test_workflow_progress_folds_phases_and_agents() -> None:
    t = turn()
    t.message(task_started(task_type="local_workflow", workflow_name="Deploy"))
    progress = {
        "type": "system",
        "subtype": "task_progress",
        "task_id": "t1",
        "description": "ignored",
        "usage": {"total_tokens": 1, "tool_uses": 2, "duration_ms": 3},
        "workflow_progress": [
            {"type": "workflow_agent", "index": 2, "label": "b", "state": "error", "skipped": True},
            {"type": "workflow_agent", "index": 1, "label": "a", "state": "running", "queuedAt": 5, "phaseIndex": 1},
            {"type": "workflow_phase", "index": 1, "title": "Build", "kind": "parallel"},
            {"type": "workflow_agent", "index": 0, "label": "bad", "state": "done"},
        ],
    }
    (delta,) = out(t.message(progress))
    snapshot = delta["snapshot"]
    assert snapshot["description"] == "Do it" and snapshot["workflowName"] == "Deploy"
    assert snapshot["workflow"]["phases"] == [{"index": 1, "title": "Build", "kind": "parallel"}]
    assert snapshot["workflow"]["agents"] == [
        {
            "index": 1,
            "label": "a",
            "state": "queued",
            "model": "unknown",
            "attempt": 1,
            "cached": False,
            "lastProgressAt": 5,
            "phaseIndex": 1,
            "queuedAt": 5,
        },
        {
            "index": 2,
            "label": "b",
            "state": "skipped",
            "model": "unknown",
            "attempt": 1,
            "cached": False,
            "lastProgressAt": 0,
        },
    ]
    updated = {
        "type": "system",
        "subtype": "task_updated",
        "task_id": "t1",
        "patch": {"status": "paused", "error": "e"},
    }
    (delta,) = out(t.message(updated))
    assert delta["flush"] is True and delta["snapshot"]["status"] == "pending"


# -- plans (§4.6.3) -------------------------------------------------------------------------


def test_todo_write_snapshot_follows_its_open() -> None:
    t = turn()
    todos = [
        {"content": "Plan", "status": "completed"},
        {"content": "Build", "status": "in_progress", "activeForm": " Building "},
        {"content": "Skip", "status": "weird"},
        {"content": " ", "status": "pending"},
    ]
    deltas = out(t.message(tool_use("toolu_t", "TodoWrite", {"todos": todos})))
    assert [d["kind"] for d in deltas] == ["turn.open", "item.open", "item.close"]
    assert deltas[2]["item"] == {
        "type": "planSteps",
        "steps": [{"step": "Plan", "status": "completed"}, {"step": "Building", "status": "active"}],
    }
    assert deltas[2]["presentation"]["title"] == "Building" and deltas[2]["presentation"]["suppress"] is True
    assert plans.todo_steps({"todos": [{"content": 1}]}) is None


def test_task_list_tools_fold_into_snapshots() -> None:
    t = turn()
    t.message(tool_use("c1", "TaskCreate", {"subject": " Write docs ", "activeForm": "Writing docs"}))
    create = tool_result("c1", "created")
    create["tool_use_result"] = {"task": {"id": "1", "subject": "Write docs"}}
    deltas = out(t.message(create))
    assert deltas[1]["item"]["steps"] == [{"step": "Write docs", "status": "pending"}]
    t.message(tool_use("c2", "TaskUpdate", {"taskId": "1", "status": "in_progress"}))
    update = tool_result("c2", '{"success":true,"taskId":"1"}')
    assert out(t.message(update))[1]["item"]["steps"] == [{"step": "Writing docs", "status": "active"}]
    t.message(tool_use("c3", "TaskUpdate", {"taskId": "1", "status": "in_progress"}))
    assert kinds(t.message(tool_result("c3", '{"success":true,"taskId":"1"}'))) == ["item.close"]
    t.message(tool_use("c4", "TaskList", {}))
    listed = tool_result(
        "c4",
        json.dumps(
            {
                "tasks": [
                    {"id": "1", "subject": "Docs", "status": "completed"},
                    {"id": "2", "subject": "x", "status": "deleted"},
                ]
            }
        ),
    )
    assert out(t.message(listed))[1]["item"]["steps"] == [{"step": "Docs", "status": "completed"}]
    t.message(tool_use("c5", "TaskGet", {"taskId": "1"}))
    assert out(t.message(tool_result("c5", '{"task":null}')))[1]["item"]["steps"] == []
    t.message(tool_use("c6", "TaskCreate", {"subject": "x"}))
    assert kinds(t.message(tool_result("c6", "{}", is_error=True))) == ["item.close"]
