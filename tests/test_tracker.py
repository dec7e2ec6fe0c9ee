"""Open-work tracking and the settlement of a dead bridge's threads."""

from __future__ import annotations

from bbridge.daemon.tracker import Tracker


def ev(kind: str, turn: str | None, **fields: object) -> dict[str, object]:
    scope = {"kind": "thread"} if turn is None else {"kind": "turn", "turnId": turn}
    return {"type": kind, "threadId": "t", "providerThreadId": "p", "scope": scope, **fields}


def test_settle_failed_closes_items_and_turns_in_order() -> None:
    tracker = Tracker()
    tracker.observe("t", ev("turn/started", "T1"))
    cmd = {
        "type": "commandExecution",
        "id": "i1",
        "command": "ls",
        "cwd": "/",
        "status": "pending",
        "approvalStatus": None,
    }
    task = {"type": "backgroundTask", "id": "i2", "familyId": "f", "taskType": "x", "description": "d", "status": "pending",
            "taskStatus": "running", "skipTranscript": False}  # fmt: skip
    tracker.observe("t", ev("item/started", "T1", item=cmd))
    tracker.observe("t", ev("item/started", "T1", item=task))
    events = tracker.settle_failed("t", "p", "Provider 'x' exited unexpectedly (code 3)")
    assert [e["type"] for e in events] == [
        "provider/error",
        "item/completed",
        "item/backgroundTask/completed",
        "turn/completed",
    ]
    assert events[0]["scope"] == {"kind": "thread"}
    assert events[1]["item"]["status"] == "failed" and events[1]["scope"] == {"kind": "turn", "turnId": "T1"}
    assert events[2]["item"]["status"] == "failed" and events[2]["scope"] == {"kind": "thread"}
    assert events[3]["status"] == "failed"
    assert tracker.settle_failed("t", "p", "again") == []


def test_a_settled_turn_forgets_its_unsettled_items_but_not_background_work() -> None:
    tracker = Tracker()
    tracker.observe("t", ev("turn/started", "T1"))
    tracker.observe(
        "t", ev("item/started", "T1", item={"type": "toolCall", "id": "i1", "tool": "x", "status": "pending"})
    )
    bg = {"type": "delegation", "id": "i2", "childRef": "c", "label": "l", "status": "pending", "background": True}
    tracker.observe("t", ev("item/started", "T1", item=bg))
    tracker.observe("t", ev("turn/completed", "T1", status="completed"))
    work = tracker.work("t")
    assert list(work.open_turns) == [] and list(work.open_items) == ["i2"]
    tracker.observe("t", ev("item/delegation/completed", None, item={**bg, "status": "completed"}))
    assert tracker.work("t").idle()


def test_idle_threads_settle_nothing() -> None:
    tracker = Tracker()
    tracker.observe("t", ev("turn/started", "T1"))
    tracker.observe("t", ev("turn/completed", "T1", status="completed"))
    assert tracker.settle_failed("t", "p", "gone") == []
