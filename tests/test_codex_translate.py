"""The codex translator, rule by rule, for what no recorded cell exercises (spec §3, the [unverified] rules).

The recorded cells prove the common path byte for byte (`test_translate_parity.py`); these pin the
rules only the reference's source shows. Every batch goes through the grammar check of `session.delta_params`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bbridge.core import grammar as g
from bridges.codex import presentation as p
from bridges.codex import ratelimits, rawoutput
from bridges.codex.fields import ShapeError
from bridges.codex.provider_errors import error_info
from bridges.codex.session import DeltaPath, delta_params
from bridges.codex.translate import Translator

THREAD, TURN = "th-1", "tu-1"


def out(deltas: list[g.Delta]) -> list[dict[str, Any]]:
    encoded: list[dict[str, Any]] = json.loads(delta_params("thr_x", deltas))["deltas"]
    return encoded


def run(t: Translator, method: str, **params: Any) -> list[dict[str, Any]]:
    return out(t.translate({"method": method, "params": params}))


def item(t: Translator, method: str, **fields: Any) -> list[dict[str, Any]]:
    return run(t, method, threadId=THREAD, turnId=TURN, item={"id": "i1", **fields})


def command(status: str = "completed", output: str | None = None, item_id: str = "call_1") -> dict[str, Any]:
    return {
        "type": "commandExecution",
        "id": item_id,
        "command": "/bin/bash -lc 'ls -la'",
        "cwd": "/w",
        "status": status,
        "aggregatedOutput": output,
        "exitCode": 0,
        "durationMs": 5,
    }


# -- JavaScript semantics and presentation helpers (§3.5) -------------------------------


def test_title_trims_the_js_set_takes_the_first_line_and_limits_utf16() -> None:
    assert p.title("\ufeff  one\n two") == "one"
    assert p.title(" \n ") is None
    assert p.title("😀" * 100) == "😀" * 79 + "\ud83d…"
    assert p.title("\x1cx") == "\x1cx"


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("/bin/bash -lc 'ls -la'", "ls -la"),
        ('zsh -c "echo \\"hi\\""', 'echo \\"hi\\"'),
        ("sh -lc x", "x"),
        ("bash -x foo", "bash -x foo"),
        ("/usr/bin/bashful -lc x", "/usr/bin/bashful -lc x"),
    ],
)
def test_shell_unwrapping(command: str, shown: str) -> None:
    assert p.unwrap_command(command) == shown


def test_file_change_names_are_deduplicated_before_counting() -> None:
    assert p.file_change(["/a/x.py", "/b/x.py"]).label.pending == "Editing file"
    several = p.file_change(["/a/x.py", "/a/y.py/"])
    assert (several.label.pending, several.title) == ("Editing files", "x.py, y.py")


# -- §3.3 handled notifications --------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "channel", "kind"),
    [
        ("item/reasoning/summaryTextDelta", "reasoningSummary", "item.textDelta"),
        ("item/reasoning/textDelta", "reasoningText", "item.textDelta"),
        ("item/plan/delta", "plan", "item.textDelta"),
        ("item/commandExecution/outputDelta", "command", "item.outputDelta"),
        ("item/fileChange/outputDelta", "fileChange", "item.outputDelta"),
    ],
)
def test_text_and_output_channels(method: str, channel: str, kind: str) -> None:
    deltas = run(Translator(), method, threadId=THREAD, turnId=TURN, itemId="i", delta="x", summaryIndex=0)
    assert deltas == [
        {"kind": kind, "key": {"providerItemId": "i"}, "channel": channel, "text": "x", "providerTurnId": TURN}
    ]


def test_mcp_progress_keeps_a_message_only_when_non_empty() -> None:
    t = Translator()
    base = {"threadId": THREAD, "turnId": TURN, "itemId": "m"}
    assert run(t, "item/mcpToolCall/progress", **base, message="half") == [
        {"kind": "item.progress", "key": {"providerItemId": "m"}, "message": "half", "providerTurnId": TURN}
    ]
    assert "message" not in run(t, "item/mcpToolCall/progress", **base, message="")[0]


def test_plan_updates_close_the_plan_steps_channel() -> None:
    plan = [{"step": "read", "status": "completed"}, {"step": "write", "status": "inProgress"}]
    (delta,) = run(Translator(), "turn/plan/updated", threadId=THREAD, turnId=TURN, plan=plan, explanation="why")
    assert delta == {
        "kind": "item.close",
        "key": {"channel": "planSteps"},
        "status": "completed",
        "item": {
            "type": "planSteps",
            "steps": [{"step": "read", "status": "completed"}, {"step": "write", "status": "active"}],
            "explanation": "why",
        },
        "presentation": {
            "label": {"pending": "Updating plan", "completed": "Updated plan"},
            "icon": {"glyph": "ListTodo"},
            "title": "write",
        },
        "providerTurnId": TURN,
    }
    (quiet,) = run(Translator(), "turn/plan/updated", threadId=THREAD, turnId=TURN, plan=[], explanation=None)
    assert quiet["item"] == {"type": "planSteps", "steps": []} and "title" not in quiet["presentation"]


def test_thread_level_notifications() -> None:
    t = Translator()
    assert run(t, "thread/compacted", threadId=THREAD, turnId=TURN) == [
        {"kind": "context.compacted", "providerTurnId": TURN}
    ]
    assert run(t, "thread/name/updated", threadId=THREAD, threadName="Named") == [
        {"kind": "thread.name", "name": "Named"}
    ]
    assert run(t, "thread/name/updated", threadId=THREAD) == []
    assert run(t, "thread/archived", threadId=THREAD) == []
    goal = {
        "objective": "ship",
        "status": "active",
        "tokenBudget": None,
        "tokensUsed": 3,
        "timeUsedSeconds": 1.5,
        "x": 1,
    }
    assert run(t, "thread/goal/updated", threadId=THREAD, goal=goal) == [
        {
            "kind": "extension.state",
            "extensionKind": "provider-codex/goal",
            "payload": {
                "objective": "ship",
                "status": "active",
                "tokenBudget": None,
                "tokensUsed": 3,
                "timeUsedSeconds": 1.5,
            },
        }
    ]


def test_warnings() -> None:
    t = Translator()
    assert run(t, "deprecationNotice", summary="old", details="use new") == [
        {"kind": "provider.warning", "summary": "old", "details": "use new", "category": "deprecation"}
    ]
    assert run(t, "configWarning", summary="bad", details=None) == [
        {"kind": "provider.warning", "summary": "bad", "category": "config"}
    ]


def test_a_bad_shape_is_an_unvouched_unhandled_and_unknown_methods_follow_coverage() -> None:
    t = Translator()
    (bad,) = run(t, "turn/completed", threadId=THREAD, turn={"id": TURN, "status": "weird"})
    assert bad["kind"] == "unhandled" and bad["vouchedTurn"] is False and "providerTurnId" not in bad
    assert bad["raw"] == {
        "jsonrpc": "2.0",
        "method": "turn/completed",
        "params": {"threadId": THREAD, "turn": {"id": TURN, "status": "weird"}},
    }
    (unknown_info,) = run(
        t,
        "turn/completed",
        threadId=THREAD,
        turn={"id": TURN, "status": "failed", "error": {"message": "x", "codexErrorInfo": "nope"}},
    )
    assert unknown_info["kind"] == "unhandled"
    assert run(t, "thread/status/changed", threadId=THREAD) == []
    assert run(t, "item/commandExecution/terminalInteraction", stdin="") == []
    assert (
        run(t, "item/commandExecution/terminalInteraction", stdin="y")[0]["rawType"]
        == "item/commandExecution/terminalInteraction"
    )
    (fs_changed,) = run(t, "fs/changed", threadId=THREAD)
    assert fs_changed["rawType"] == "fs/changed"
    assert out(t.translate({"method": "model/rerouted"})) == [
        {
            "kind": "unhandled",
            "raw": {"jsonrpc": "2.0", "method": "model/rerouted"},
            "rawType": "model/rerouted",
            "vouchedTurn": False,
        }
    ]
    assert t.translate({"method": "turn/started", "params": None}) == []


def test_turn_status_in_progress_settles_completed_with_a_checkpoint() -> None:
    (boundary,) = run(
        Translator(), "turn/completed", threadId=THREAD, turn={"id": TURN, "status": "inProgress", "error": None}
    )
    assert boundary == {
        "kind": "turn.boundary",
        "providerTurnId": TURN,
        "status": "completed",
        "providerCheckpointId": TURN,
    }


# -- §3.4 items ---------------------------------------------------------------------------


def test_mcp_tool_items_and_node_repl_presentations() -> None:
    t = Translator()
    (opened,) = item(
        t,
        "item/started",
        type="mcpToolCall",
        server="github",
        tool="list",
        status="inProgress",
        arguments=None,
        error=None,
        durationMs=None,
    )
    assert opened["item"] == {"type": "tool", "server": "github", "tool": "list", "args": None}
    assert opened["presentation"] == {
        "label": {"pending": "Running list", "completed": "Ran list"},
        "icon": {"glyph": "Toolbox"},
        "title": "github",
    }
    (closed,) = item(
        t,
        "item/completed",
        type="mcpToolCall",
        server="node_repl",
        tool="js",
        status="failed",
        arguments={"title": "Sum"},
        error={"message": "boom"},
        durationMs=4,
    )
    assert closed["status"] == "failed"
    assert closed["item"] == {
        "type": "tool",
        "server": "node_repl",
        "tool": "js",
        "args": {"title": "Sum"},
        "error": "boom",
        "durationMs": 4,
    }
    assert (
        closed["presentation"]["label"]["pending"] == "Running JavaScript" and closed["presentation"]["title"] == "Sum"
    )
    (reset,) = item(
        t,
        "item/started",
        type="mcpToolCall",
        server="node_repl",
        tool="js_reset",
        status="inProgress",
        error=None,
        durationMs=None,
    )
    assert "args" not in reset["item"] and reset["presentation"]["label"]["completed"] == "Reset JavaScript session"


def test_dynamic_tool_failure_text_and_injected_presentation() -> None:
    shown = p.make("Asking", "Asked", "Question")
    t = Translator({"ask": shown})
    content = [{"type": "inputText", "text": "  "}, {"type": "inputImage", "imageUrl": "u"}]
    (closed,) = item(
        t,
        "item/completed",
        type="dynamicToolCall",
        tool="ask",
        arguments={},
        status="failed",
        contentItems=content,
        success=False,
        durationMs=None,
    )
    assert closed["item"] == {
        "type": "tool",
        "server": "bb",
        "tool": "ask",
        "args": {},
        "result": "[image: u]",
        "error": "[image: u]",
    }
    assert closed["presentation"] == {
        "label": {"pending": "Asking", "completed": "Asked"},
        "icon": {"glyph": "Question"},
    }
    (bare,) = item(
        Translator(),
        "item/completed",
        type="dynamicToolCall",
        tool="x",
        arguments=None,
        status="failed",
        contentItems=None,
        success=False,
        durationMs=1,
    )
    assert bare["item"] == {
        "type": "tool",
        "tool": "x",
        "args": None,
        "error": "Dynamic tool call failed",
        "durationMs": 1,
    }


def test_declined_items_close_interrupted_and_denied() -> None:
    (closed,) = run(Translator(), "item/completed", threadId=THREAD, turnId=TURN, item=command("declined"))
    assert (closed["status"], closed["approvalStatus"]) == ("interrupted", "denied")
    assert list(closed) == ["kind", "key", "status", "approvalStatus", "item", "presentation", "providerTurnId"]


def test_web_fetch_image_view_plan_and_unknown_items() -> None:
    t = Translator()
    (fetch,) = item(
        t,
        "item/completed",
        type="webSearch",
        query="",
        action={"type": "findInPage", "url": "https://x", "pattern": "p"},
    )
    assert fetch["item"] == {"type": "webFetch", "url": "https://x", "pattern": "p"}
    assert (
        fetch["presentation"]["label"]["pending"] == "Fetching page" and fetch["presentation"]["title"] == "https://x"
    )
    (page,) = item(t, "item/completed", type="webSearch", query="", action={"type": "openPage", "url": "https://y"})
    assert page["item"] == {"type": "webFetch", "url": "https://y", "pattern": None}
    (no_url,) = item(t, "item/completed", type="webSearch", query="", action={"type": "openPage", "url": None})
    assert (no_url["kind"], no_url["vouchedTurn"], no_url["providerTurnId"]) == ("unhandled", True, TURN)
    (search,) = item(
        t, "item/completed", type="webSearch", query="c", action={"type": "search", "query": "b", "queries": ["a", "b"]}
    )
    assert search["item"]["queries"] == ["a", "b", "c"]
    (image,) = item(t, "item/completed", type="imageView", path="/tmp/shot.png")
    assert (
        image["item"] == {"type": "imageView", "path": "/tmp/shot.png"} and image["presentation"]["title"] == "shot.png"
    )
    (plan,) = item(t, "item/started", type="plan", text="1. x")
    assert plan["item"] == {"type": "plan", "text": "1. x"} and plan["presentation"]["icon"] == {"glyph": "ListTodo"}
    (review,) = item(t, "item/completed", type="enteredReviewMode", review="x")
    assert review["rawType"] == "item/completed" and review["providerTurnId"] == TURN
    assert item(t, "item/completed", type="userMessage", content=[{"type": "text", "text": "hi"}]) == []
    assert item(t, "item/completed", type="userMessage", content=[{"type": "audio"}])[0]["kind"] == "unhandled"


def test_collab_calls_with_receivers_are_delegations() -> None:
    t = Translator()
    fields = {
        "type": "collabAgentToolCall",
        "tool": "spawnAgent",
        "senderThreadId": THREAD,
        "receiverThreadIds": ["ag-1"],
        "model": None,
        "reasoningEffort": None,
    }
    (opened,) = item(
        t, "item/started", **fields, status="inProgress", prompt=" Go read ", agentsStates={"ag-1": "running"}
    )
    assert opened["item"] == {"type": "delegation", "childRef": "ag-1", "label": "Go read", "background": False}
    assert opened["presentation"] == {
        "label": {"pending": "Spawning agent", "completed": "Spawned agent"},
        "icon": {"glyph": "UserRound"},
        "title": "Go read",
    }
    (child,) = run(t, "turn/started", threadId="ag-1", turn={"id": "tu-child", "status": "inProgress"})
    assert child == {"kind": "turn.open", "providerTurnId": "tu-child", "parentRef": "i1"}
    (closed,) = item(
        t, "item/completed", **fields, status="completed", prompt=None, agentsStates={"ag-1": {"status": "done"}}
    )
    assert closed["item"] == {
        "type": "delegation",
        "childRef": "ag-1",
        "label": "Spawn agent",
        "background": False,
        "summary": 'ag-1: {"status":"done"}',
    }


# -- §3.6 rate limits ----------------------------------------------------------------------


def limits(t: Translator, **snapshot: Any) -> dict[str, Any]:
    (delta,) = run(t, "account/rateLimits/updated", rateLimits=snapshot)
    shown: dict[str, Any] = delta["rateLimits"]
    return shown


def test_rate_limit_windows_thresholds_and_kinds() -> None:
    t = Translator()
    shown = limits(
        t,
        primary={"usedPercent": 91, "resetsAt": 10},
        secondary={"usedPercent": 120},
        individualLimit={"limit": "10", "used": "5", "remainingPercent": 50, "resetsAt": 2},
    )
    assert shown["windows"] == [
        {"providerKey": "primary", "label": "Current session", "status": "warning", "resetsAtMs": 10000},
        {"providerKey": "secondary", "label": "Weekly limit", "status": "blocked", "resetsAtMs": None},
        {"providerKey": "individual-limit", "label": "Spend control", "status": "allowed", "resetsAtMs": 2000},
    ]
    assert (shown["status"], shown["kind"]) == ("blocked", "spend-control")
    assert limits(Translator(), credits={"hasCredits": False, "unlimited": False})["kind"] == "credits"
    empty = limits(Translator(), limitId="codex", primary=None, credits=None)
    assert (empty["status"], empty["kind"], empty["windows"]) == ("unknown", "unknown", [])


def test_rate_limit_reason_is_sticky_only_while_still_true() -> None:
    t = Translator()
    reached = limits(t, primary={"usedPercent": 100}, rateLimitReachedType="rate_limit_reached")
    assert (reached["reachedReason"], reached["status"], reached["kind"]) == (
        "rate_limit_reached",
        "blocked",
        "subscription-window",
    )
    assert limits(t, rateLimitReachedType=None)["reachedReason"] == "rate_limit_reached"
    cleared = limits(t, primary={"usedPercent": 10})
    assert (cleared["reachedReason"], cleared["status"]) == (None, "allowed")


def test_rate_limits_merge_over_the_handshake_seed() -> None:
    t = Translator()
    t.seed_rate_limits({"rateLimits": {"primary": {"usedPercent": 95}}})
    assert limits(t, secondary={"usedPercent": 1})["windows"][0]["status"] == "warning"
    with pytest.raises(ShapeError):
        ratelimits.check({"primary": {"usedPercent": "x"}})


# -- §3.7 errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ("usageLimitExceeded", ("rate-limit", "usageLimitExceeded", None)),
        ("sandboxError", ("sandbox", "sandboxError", None)),
        ({"httpConnectionFailed": {"httpStatusCode": 401}}, ("connection-failed", "httpConnectionFailed", 401)),
        (
            {"responseTooManyFailedAttempts": {"httpStatusCode": None}},
            ("too-many-failed-attempts", "responseTooManyFailedAttempts", None),
        ),
        (
            {"activeTurnNotSteerable": {"turnKind": "compact"}},
            ("active-turn-not-steerable", "activeTurnNotSteerable", None),
        ),
    ],
)
def test_error_info_table(info: Any, expected: tuple[str, str, int | None]) -> None:
    mapped = error_info(info)
    assert mapped is not None and (mapped.category, mapped.providerCode, mapped.httpStatusCode) == expected


def test_retry_correlation_keeps_the_precise_variant_for_the_same_failure() -> None:
    t = Translator()
    retry = {
        "message": "Reconnecting... 1/5",
        "codexErrorInfo": {"responseStreamDisconnected": {"httpStatusCode": 502}},
        "additionalDetails": "boom",
    }
    run(t, "error", threadId=THREAD, turnId=TURN, error=retry, willRetry=True)
    (final,) = run(
        t, "error", threadId=THREAD, turnId=TURN, error={"message": "boom", "codexErrorInfo": "other"}, willRetry=False
    )
    assert final["errorInfo"] == {
        "category": "stream-disconnected",
        "providerCode": "responseStreamDisconnected",
        "httpStatusCode": 502,
    }
    (scoped,) = run(t, "error", threadId=THREAD, error={"message": "m", "additionalDetails": ""})
    assert scoped == {"kind": "provider.error", "message": "Provider error", "detail": "m", "threadScoped": True}
    assert (
        run(t, "error", threadId=THREAD, error={"message": "m", "codexErrorInfo": {"new": {}}})[0]["kind"]
        == "unhandled"
    )


# -- §3.11 raw command output ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "capture"),
    [
        ("Output:\nhello", "hello"),
        ("plain text", "plain text"),
        ("Chunk ID: 1\nWall time: 2\nOutput:\nhi\nthere", "hi\nthere"),
        ("Wall time: 2\nstray\nno marker", "Wall time: 2\nstray\nno marker"),
        ("Wall time: 2\nstray\nOutput:\nx", None),
        ("Chunk ID: 1\nWall time: 2", None),
    ],
)
def test_raw_output_header_parsing(text: str, capture: str | None) -> None:
    assert rawoutput.parse(text) == capture
    assert rawoutput.output_text([{"type": "input_text"}, {"type": "input_image"}]) == "[input_text]\n[input_image]"


def raw(t: Translator, item_fields: dict[str, Any]) -> list[dict[str, Any]]:
    return run(t, "rawResponseItem/completed", threadId=THREAD, turnId=TURN, item=item_fields)


def test_a_shell_close_waits_for_its_raw_output_and_is_repaired() -> None:
    t = Translator()
    assert raw(t, {"type": "function_call", "name": "exec_command", "call_id": "call_1", "arguments": "{}"}) == []
    assert run(t, "item/completed", threadId=THREAD, turnId=TURN, item=command()) == []
    (released,) = raw(
        t, {"type": "function_call_output", "call_id": "call_1", "output": "Chunk ID: a\r\nOutput:\r\nfile\r\n"}
    )
    assert released["item"] == {
        "type": "command",
        "command": "/bin/bash -lc 'ls -la'",
        "cwd": "/w",
        "exitCode": 0,
        "durationMs": 5,
        "aggregatedOutput": "file\n",
    }
    (again,) = run(t, "item/completed", threadId=THREAD, turnId=TURN, item=command(output="old"))
    assert list(again["item"]) == ["type", "command", "cwd", "aggregatedOutput", "exitCode", "durationMs"]
    assert again["item"]["aggregatedOutput"] == "file\n"


def test_withheld_closes_precede_the_boundary_and_empty_output_removes_the_key() -> None:
    t = Translator()
    raw(t, {"type": "function_call", "name": "bash", "call_id": "call_1"})
    raw(t, {"type": "function_call", "name": "bash", "call_id": "call_2"})
    raw(t, {"type": "function_call_output", "call_id": "call_2", "output": ""})
    (emptied,) = run(t, "item/completed", threadId=THREAD, turnId=TURN, item=command(output="x", item_id="call_2"))
    assert "aggregatedOutput" not in emptied["item"]
    assert run(t, "item/completed", threadId=THREAD, turnId=TURN, item=command()) == []
    kinds = [d["kind"] for d in run(t, "turn/completed", threadId=THREAD, turn={"id": TURN, "status": "completed"})]
    assert kinds == ["item.close", "turn.boundary"]


# -- §3.9, §3.10 turns, inputs and sub-agents -----------------------------------------------


def test_input_accepted_follows_the_open_and_a_boundary_empties_the_fifo() -> None:
    t = Translator()
    t.queue_input(THREAD, "creq_aaaaaaaaaa")
    t.queue_input(THREAD, "creq_bbbbbbbbbb")
    assert t.unqueue_input(THREAD, "creq_bbbbbbbbbb") and not t.unqueue_input(THREAD, "creq_bbbbbbbbbb")
    assert run(t, "turn/started", threadId=THREAD, turn={"id": TURN, "status": "inProgress"}) == [
        {"kind": "turn.open", "providerTurnId": TURN},
        {"kind": "input.accepted", "clientRequestId": "creq_aaaaaaaaaa", "providerTurnId": TURN},
    ]


def test_sub_agent_interrupted_and_thread_closed() -> None:
    t = Translator()
    activity = {"type": "subAgentActivity", "id": "call_s", "agentThreadId": "ag", "agentPath": "/root/a"}
    (opened,) = run(t, "item/completed", threadId=THREAD, turnId=TURN, item={**activity, "kind": "started"})
    assert opened["item"] == {"type": "delegation", "childRef": "ag", "label": "/root/a", "background": False}
    (closed,) = run(t, "item/completed", threadId=THREAD, turnId=TURN, item={**activity, "kind": "interrupted"})
    assert (closed["kind"], closed["status"], closed["providerTurnId"]) == ("item.close", "interrupted", TURN)
    t2 = Translator()
    run(t2, "item/completed", threadId=THREAD, turnId=TURN, item={**activity, "kind": "started"})
    (failed,) = run(t2, "thread/closed", threadId="ag")
    assert failed["status"] == "failed"
    assert run(t2, "thread/closed", threadId="ag")[0]["kind"] == "unhandled"


# -- §3.2 emission ----------------------------------------------------------------------------


def test_replayed_usage_is_filtered_until_the_first_turn_opens() -> None:
    path = DeltaPath(awaiting_replayed_usage=True)
    assert path.push([g.SessionReset()]) is None
    usage = Translator().translate(
        {
            "method": "thread/tokenUsage/updated",
            "params": {
                "threadId": THREAD,
                "turnId": "old",
                "tokenUsage": {
                    "total": dict.fromkeys(
                        ("totalTokens", "inputTokens", "cachedInputTokens", "outputTokens", "reasoningOutputTokens"), 1
                    ),
                    "last": dict.fromkeys(
                        (
                            "totalTokens",
                            "inputTokens",
                            "cachedInputTokens",
                            "outputTokens",
                            "reasoningOutputTokens",
                            "cacheWriteInputTokens",
                        ),
                        2,
                    ),
                    "modelContextWindow": 100,
                },
            },
        }
    )
    assert path.push(usage) is None
    flushed = path.announce()
    assert flushed is not None
    assert out(flushed) == [
        {"kind": "session.reset"},
        {"kind": "contextWindow", "used": 2, "size": 100, "estimated": False, "attach": "currentOrLast"},
    ]
    opened = path.push([g.TurnOpen(providerTurnId=TURN)])
    assert opened is not None and list(path.open_turns) == [TURN]
    kept = path.push(usage)
    assert kept is not None and [d["kind"] for d in out(kept)] == ["usage", "contextWindow"]
    assert out(kept)[0]["last"] == {
        "totalTokens": 2,
        "inputTokens": 2,
        "cachedInputTokens": 2,
        "outputTokens": 2,
        "reasoningOutputTokens": 2,
    }


def test_codex_0171_read_state_markers_are_noise() -> None:
    note = {
        "method": "thread/readState/changed",
        "params": {"threadId": "t", "readState": {"firstUnread": {"type": "turn", "turnId": "u"}, "revision": 3}},
    }
    assert Translator().translate(note) == []
