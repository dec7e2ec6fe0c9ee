"""The codex translator's handled notifications (spec §3.3), presentation helpers (§3.5), turns, inputs and
sub-agents (§3.9, §3.10) and emission (§3.2).

The recorded cells prove the common path byte for byte (`test_translate_parity.py`); the
test_codex_translate_*.py files pin the rules only the reference's source shows (spec §3, [unverified]).
"""

from __future__ import annotations

import pytest

from bbridge.core import grammar as g
from bridges.codex import presentation as p
from bridges.codex.session import DeltaPath
from bridges.codex.translate import Translator
from tests.codex_notifications import THREAD, TURN, out, run

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
