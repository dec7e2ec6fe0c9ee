"""The REAL `pi --mode rpc` (pi 0.84.0 on node 22), offline against a scripted Chat Completions API.

No bridge: these smoke tests prove the live-test infrastructure the pi bridge will be tested with —
`tests/live/openai_chat.py` (the scripted server) and `tests/live/pi.py` (the offline agent dir and the RPC
driver) — and pin the RPC behaviour the bridge relies on (`tests/live/PI_NOTES.md`): a streamed turn with thinking,
a bash tool call, state / models / entries and a resume, abort of a stalled stream and of a running tool, a 401
(no retry), a 500 (fast auto-retries, then failure or recovery), steer and follow-up while busy, and compaction.
`make live-agents` installs pi; the tests skip only when the npm registry is unreachable. Every wait is bounded,
and each test checks that no process it started (pi, node, bash) outlives it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.live import openai_chat as chat
from tests.live.pi import API_KEY, MODEL, PROVIDER, Pi, PiRpc, ensure_pi, offline_env, session_header
from tests.live.processes import no_leftovers

Json = dict[str, Any]


@pytest.fixture(scope="session")
def pi() -> Pi:
    return ensure_pi()


@dataclass
class Lab:
    """One scripted server, one offline pi home, one workspace; the pi processes it started."""

    pi: Pi
    api: chat.ScriptedChat
    env: dict[str, str]
    workspace: Path
    session: Path
    children: list[PiRpc] = field(default_factory=list)

    def spawn(self, **kw: Any) -> PiRpc:
        """A pi on this lab's session file that answered `get_state`."""
        rpc = PiRpc(self.pi, self.env, self.workspace, self.session, **kw)
        self.children.append(rpc)
        rpc.ready()
        return rpc


@contextmanager
def lab(pi: Pi, tmp_path: Path, settings: Json | None = None) -> Iterator[Lab]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with chat.ScriptedChat() as api:
        env = offline_env(api.base_url, tmp_path / "home", settings=settings)
        here = Lab(pi, api, env, workspace, tmp_path / "sessions" / "thread.jsonl")
        try:
            yield here
        finally:
            for child in here.children:
                child.close()
    no_leftovers([tmp_path], "a pi (node) process or one of its shells outlived the test")


def updates(rpc: PiRpc, *kinds: str, since: int = 0) -> list[Json]:
    """The `assistantMessageEvent`s of `message_update` events (of the given kinds), in order."""
    found = [e["assistantMessageEvent"] for e in rpc.events("message_update")[since:]]
    return [a for a in found if not kinds or a["type"] in kinds]


def settle(rpc: PiRpc, message: str, *, timeout: float = 15.0, **extra: Any) -> tuple[int, Json]:
    """Prompt, wait for `agent_settled`: the index the prompt started at and the prompt's response."""
    start = rpc.mark()
    answer = rpc.request({"type": "prompt", "message": message, **extra})
    assert answer["success"] is True, answer
    rpc.wait_event("agent_settled", timeout, since=start)
    return start, answer


def text_delta(line: Json) -> bool:
    return line.get("type") == "message_update" and line["assistantMessageEvent"]["type"] == "text_delta"


def test_a_prompt_streams_thinking_and_text(pi: Pi, tmp_path: Path) -> None:
    message = "Hello\u2028from the scripted model!"  # U+2028 stays inside one JSONL record (LF-only framing)
    with lab(pi, tmp_path) as here:
        here.api.push(chat.text(message, thinking="Weighing a greeting."))
        rpc = here.spawn()
        assert not here.session.exists()  # pi writes the session file with the first assistant message
        started = time.monotonic()
        start, answer = settle(rpc, "Say hello.")
        elapsed = time.monotonic() - started
        stats = rpc.ok({"type": "get_session_stats"})

    assert answer == {"id": answer["id"], "type": "response", "command": "prompt", "success": True}
    lines = rpc.lines[start:]
    assert lines[0] is rpc.response(answer["id"])  # the answer comes before agent_start
    kinds = [e["type"] for e in rpc.events() if e["type"] != "message_update"]
    assert kinds == [
        "agent_start",
        "turn_start",
        "message_start",  # the user message
        "message_end",
        "message_start",  # the assistant message, empty, stopReason "pending"
        "message_end",
        "turn_end",
        "agent_end",
        "agent_settled",
    ]
    user, assistant = lines[3]["message"], lines[5]["message"]
    assert user["role"] == "user" and user["content"] == [{"type": "text", "text": "Say hello."}]
    assert assistant["role"] == "assistant" and assistant["content"] == [] and assistant["stopReason"] == "pending"
    streamed = updates(rpc)
    order = [u["type"] for u in streamed if not u["type"].endswith("_delta")]
    assert order == ["thinking_start", "text_start", "thinking_end", "text_end"]  # every block closes at the end
    assert all(set(u) <= {"type", "contentIndex", "delta", "content"} for u in streamed)  # slimmed: no `partial`
    thinking = "".join(u["delta"] for u in streamed if u["type"] == "thinking_delta")
    said = "".join(u["delta"] for u in streamed if u["type"] == "text_delta")
    assert (thinking, said) == ("Weighing a greeting.", message)
    assert {u["contentIndex"] for u in streamed if u["type"].startswith("thinking")} == {0}
    assert {u["contentIndex"] for u in streamed if u["type"].startswith("text")} == {1}

    (end,) = [e["message"] for e in rpc.events("message_end") if e["message"]["role"] == "assistant"]
    assert end["content"] == [
        {"type": "thinking", "thinking": "Weighing a greeting.", "thinkingSignature": "reasoning_content"},
        {"type": "text", "text": message},
    ]
    assert end["stopReason"] == "stop" and end["rawStopReason"] == "stop"
    assert end["provider"] == PROVIDER and end["model"] == MODEL and end["api"] == "openai-completions"
    assert end["usage"]["input"] == 100 and end["usage"]["output"] == 25 and end["usage"]["reasoning"] == 5
    assert end["usage"]["totalTokens"] == 125
    (turn_end,) = rpc.events("turn_end")
    assert turn_end["message"] == end and turn_end["toolResults"] == []
    (agent_end,) = rpc.events("agent_end")
    assert agent_end["willRetry"] is False and [m["role"] for m in agent_end["messages"]] == ["user", "assistant"]
    assert stats["contextUsage"] == {"tokens": 125, "contextWindow": 128000, "percent": 125 / 128000 * 100}
    assert elapsed < 5

    (post,) = here.api.posts()
    assert here.api.requests == [post] and post.path == "/v1/chat/completions"  # nothing else over HTTP
    assert post.headers["authorization"] == f"Bearer {API_KEY}"
    body = post.body
    assert body["model"] == MODEL and body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["reasoning_effort"] == "medium" and body["store"] is False
    assert [m["role"] for m in body["messages"]] == ["system", "user"]  # compat.supportsDeveloperRole false
    assert body["messages"][1]["content"] == [{"type": "text", "text": "Say hello."}]
    assert {t["function"]["name"] for t in body["tools"]} == {"read", "bash", "edit", "write"}

    header = session_header(here.session)
    assert header["type"] == "session" and header["version"] == 3 and header["cwd"] == str(here.workspace)


def test_a_bash_tool_call_runs_streams_and_feeds_back(pi: Pi, tmp_path: Path) -> None:
    command = 'echo "$PI_PROVIDER/$PI_MODEL $PWD"; sleep 0.3; echo two; exit 3'
    with lab(pi, tmp_path) as here:
        here.api.push(chat.bash(command, call_id="call_b1", preamble="Running it."), chat.text("It failed."))
        rpc = here.spawn()
        settle(rpc, "Run the command.")

    (start,) = rpc.events("tool_execution_start")
    assert start == {
        "type": "tool_execution_start",
        "toolCallId": "call_b1",
        "toolName": "bash",
        "args": {"command": command},
    }
    progress = rpc.events("tool_execution_update")
    assert all(u["toolCallId"] == "call_b1" and u["args"] == {"command": command} for u in progress)
    assert progress[0]["partialResult"] == {"content": []}  # the first update carries no output yet
    texts = [u["partialResult"]["content"][0]["text"] for u in progress[1:]]
    assert texts[-1] == f"scripted/{MODEL} {here.workspace}\ntwo\n" and texts[0] in texts[-1]  # accumulated
    (end,) = rpc.events("tool_execution_end")
    output = f"scripted/{MODEL} {here.workspace}\ntwo\n\n\nCommand exited with code 3"
    assert end["isError"] is True and end["result"]["content"] == [{"type": "text", "text": output}]
    kinds = rpc.types()
    assert kinds.count("turn_start") == 2 and kinds.count("agent_start") == 1  # one run, two model calls
    assert kinds.index("tool_execution_start") < kinds.index("tool_execution_end") < kinds.index("turn_end")
    calls = updates(rpc, "toolcall_start", "toolcall_delta", "toolcall_end")
    assert calls[0] == {"type": "toolcall_start", "contentIndex": 1}  # after the preamble text block
    assert calls[-1]["toolCall"] == {
        "type": "toolCall",
        "id": "call_b1",
        "name": "bash",
        "arguments": {"command": command},
    }
    first_end = rpc.events("message_end")[1]["message"]
    assert first_end["stopReason"] == "toolUse" and first_end["rawStopReason"] == "tool_calls"
    results = [e["message"] for e in rpc.events("message_end") if e["message"]["role"] == "toolResult"]
    assert [(r["toolCallId"], r["isError"]) for r in results] == [("call_b1", True)]

    first, second = here.api.posts()
    sent = second.body["messages"][len(first.body["messages"]) :]
    assert sent == [
        {
            "role": "assistant",
            "content": "Running it.",
            "tool_calls": [
                {
                    "id": "call_b1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": command}, separators=(",", ":"))},
                }
            ],
        },
        {"role": "tool", "content": output, "tool_call_id": "call_b1"},
    ]


def test_state_models_entries_and_resume(pi: Pi, tmp_path: Path) -> None:
    with lab(pi, tmp_path) as here:
        here.api.push(chat.text("First answer."), chat.text("Second answer."))
        started = time.monotonic()
        rpc = here.spawn(thinking="high")
        spawn_time = time.monotonic() - started
        state = rpc.ok({"type": "get_state"})
        models = rpc.ok({"type": "get_available_models"})["models"]
        levels = rpc.ok({"type": "get_available_thinking_levels"})["levels"]
        unknown = rpc.request({"type": "no_such_command"})
        assert rpc.proc.stdin is not None
        rpc.proc.stdin.write(b"not json\n")
        rpc.proc.stdin.flush()
        parse_error = rpc.wait_for(lambda line: line.get("command") == "parse")
        settle(rpc, "First question.")
        entries = rpc.ok({"type": "get_entries"})
        assert rpc.close() == 0  # closing stdin: pi disposes and exits 0

        resumed = here.spawn(thinking="high")
        again = resumed.ok({"type": "get_state"})
        entries_again = resumed.ok({"type": "get_entries"})
        settle(resumed, "Second question.")

    assert state["model"]["id"] == MODEL and state["model"]["provider"] == PROVIDER
    assert state["thinkingLevel"] == "high" and state["isStreaming"] is False and state["isCompacting"] is False
    assert state["sessionFile"] == str(here.session) and state["messageCount"] == 0
    assert state["steeringMode"] == "one-at-a-time" and state["followUpMode"] == "one-at-a-time"
    assert state["autoCompactionEnabled"] is True and state["pendingMessageCount"] == 0 and "sessionName" not in state
    assert models == [
        {
            "id": MODEL,
            "name": f"Scripted {MODEL}",
            "api": "openai-completions",
            "provider": PROVIDER,
            "baseUrl": here.api.base_url,
            "reasoning": True,
            "input": ["text"],
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
            "contextWindow": 128000,
            "maxTokens": 8192,
            "compat": {"supportsDeveloperRole": False},
        }
    ]
    assert state["model"] == models[0]
    assert levels == ["off", "minimal", "low", "medium", "high"]
    assert unknown["success"] is False and unknown["error"] == "Unknown command: no_such_command"
    assert unknown["command"] == "no_such_command"
    assert "id" not in parse_error and parse_error["success"] is False
    assert parse_error["error"].startswith("Failed to parse command: ")
    assert spawn_time < 10

    kinds = [e["type"] for e in entries["entries"]]
    assert kinds == ["model_change", "thinking_level_change", "message", "message"]
    assert entries["leafId"] == entries["entries"][-1]["id"]
    assert all(e["parentId"] == p["id"] for p, e in zip(entries["entries"], entries["entries"][1:], strict=False))
    assert again["sessionId"] == state["sessionId"] and again["messageCount"] == 2
    assert entries_again == entries  # a resume appends nothing until something happens
    resumed_request = here.api.posts()[-1].body["messages"]
    assert [m["role"] for m in resumed_request] == ["system", "user", "assistant", "user"]
    assert resumed_request[2]["content"] == "First answer."


def test_abort_ends_a_stalled_stream_and_a_running_tool(pi: Pi, tmp_path: Path) -> None:
    with lab(pi, tmp_path) as here:
        here.api.push(chat.text("This answer stalls after its first words " * 4, delay=20))
        here.api.push(chat.bash("echo start; sleep 30", call_id="call_sleep"))
        here.api.push(chat.text("Still here."))
        rpc = here.spawn()
        rpc.request({"type": "prompt", "message": "Write a long answer."})
        rpc.wait_for(text_delta)
        started = time.monotonic()
        aborted = rpc.request({"type": "abort"})
        stream_abort = time.monotonic() - started
        first = rpc.mark()

        mark = rpc.mark()
        rpc.request({"type": "prompt", "message": "Sleep."})
        rpc.wait_for(lambda e: e.get("type") == "tool_execution_update" and e["partialResult"]["content"], since=mark)
        started = time.monotonic()
        rpc.ok({"type": "abort"})
        tool_abort = time.monotonic() - started
        second = rpc.lines[mark:]
        settle(rpc, "Are you there?")
        state = rpc.ok({"type": "get_state"})

    assert aborted["success"] is True and stream_abort < 5 and tool_abort < 5
    kinds = [e.get("type") for e in rpc.lines[:first]]
    assert kinds[-3:] == ["agent_end", "agent_settled", "response"]  # abort is answered once the run settled
    ends = [e["message"] for e in rpc.events("message_end") if e["message"]["role"] == "assistant"]
    partial = ends[0]
    assert partial["stopReason"] == "aborted" and partial["errorMessage"] == "Request was aborted"
    assert partial["content"] == [{"type": "text", "text": "This"}]  # what had streamed
    assert rpc.events("agent_end")[0]["willRetry"] is False

    tool_end = next(e for e in second if e.get("type") == "tool_execution_end")
    output = [{"type": "text", "text": "start\n\n\nCommand aborted"}]  # the output so far, then the verdict
    assert tool_end["isError"] is True and tool_end["result"]["content"] == output
    # after the aborted tool, pi starts a turn whose assistant message is a synthetic error, then settles
    synthetic = [e["message"] for e in second if e.get("type") == "message_end" and e["message"]["role"] == "assistant"]
    assert synthetic[-1]["stopReason"] == "error" and synthetic[-1]["errorMessage"] == "This operation was aborted"
    assert synthetic[-1]["content"] == []
    assert [e.get("type") for e in second][-3:] == ["agent_end", "agent_settled", "response"]
    assert ends[-1]["content"] == [{"type": "text", "text": "Still here."}] and state["isStreaming"] is False
    assert len(here.api.posts()) == 3  # no model call for the synthetic turn


def test_a_401_fails_the_turn_at_once_without_retry(pi: Pi, tmp_path: Path) -> None:
    with lab(pi, tmp_path) as here:
        here.api.push(chat.http_error(401, "Incorrect API key provided: sk-dummy."))
        rpc = here.spawn()
        started = time.monotonic()
        settle(rpc, "Hello?")
        elapsed = time.monotonic() - started

    assert elapsed < 3 and len(here.api.posts()) == 1
    assert not {"auto_retry_start", "auto_retry_end"} & set(rpc.types())
    (agent_end,) = rpc.events("agent_end")
    failed = agent_end["messages"][-1]
    body = {"message": "Incorrect API key provided: sk-dummy.", "type": "invalid_request_error", "param": None}
    assert failed["stopReason"] == "error" and failed["content"] == []
    assert failed["errorMessage"] == "401: " + json.dumps({**body, "code": "invalid_api_key"}, separators=(",", ":"))
    assert agent_end["willRetry"] is False
    assert not updates(rpc)  # no message_update at all: message_start already carries the error
    assistant_start = [e for e in rpc.events("message_start") if e["message"]["role"] == "assistant"]
    assert assistant_start[0]["message"]["stopReason"] == "error"


def test_a_500_is_retried_fast_then_fails_or_recovers(pi: Pi, tmp_path: Path) -> None:
    with lab(pi, tmp_path) as here:  # settings: retry.maxRetries 2, retry.baseDelayMs 50
        here.api.push(chat.http_error(500), chat.http_error(500), chat.http_error(500))
        here.api.push(chat.http_error(500), chat.text("Recovered."))
        rpc = here.spawn()
        started = time.monotonic()
        settle(rpc, "Hello?")
        failing = time.monotonic() - started
        mark = rpc.mark()
        settle(rpc, "Once more?")

    first, second = rpc.lines[:mark], rpc.lines[mark:]
    error = "500: " + json.dumps(
        {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error",
            "param": None,
            "code": None,
        },
        separators=(",", ":"),
    )
    retries = [e for e in first if e.get("type") == "auto_retry_start"]
    assert retries == [
        {"type": "auto_retry_start", "attempt": 1, "maxAttempts": 2, "delayMs": 50, "errorMessage": error},
        {"type": "auto_retry_start", "attempt": 2, "maxAttempts": 2, "delayMs": 100, "errorMessage": error},
    ]
    assert [e["willRetry"] for e in first if e.get("type") == "agent_end"] == [True, True, False]
    assert [e.get("type") for e in first].count("agent_start") == 3  # each retry is a new run: agent_start again
    assert [e for e in first if e.get("type") == "auto_retry_end"] == [
        {"type": "auto_retry_end", "success": False, "attempt": 2, "finalError": error}
    ]
    assert [e.get("type") for e in first][-2:] == ["auto_retry_end", "agent_settled"]
    assert failing < 5 and len(here.api.posts()) == 5

    kinds = [e.get("type") for e in second]
    assert [e for e in second if e.get("type") == "auto_retry_end"] == [
        {"type": "auto_retry_end", "success": True, "attempt": 1}
    ]
    assert kinds.index("auto_retry_end") == kinds.index("message_end", kinds.index("auto_retry_start")) + 1
    ends = [e["message"] for e in second if e.get("type") == "message_end" and e["message"]["role"] == "assistant"]
    assert [m["stopReason"] for m in ends] == ["error", "stop"] and ends[-1]["content"][0]["text"] == "Recovered."
    # the retry resends the context without the failed assistant message
    retried = here.api.posts()[-1].body["messages"]
    assert [m["role"] for m in retried][-1] == "user" and retried[-1]["content"][0]["text"] == "Once more?"
    assert here.api.posts()[-2].body["messages"] == retried


def test_steer_and_follow_up_while_a_tool_runs(pi: Pi, tmp_path: Path) -> None:
    with lab(pi, tmp_path) as here:
        here.api.push(chat.bash("sleep 1; echo slept", call_id="call_s"), chat.text("Steered."), chat.text("Followed."))
        rpc = here.spawn()
        rpc.request({"type": "prompt", "message": "Sleep a bit."})
        rpc.wait_event("tool_execution_start")
        busy = rpc.request({"type": "prompt", "message": "Plain prompt."})
        steered = rpc.request({"type": "steer", "message": "Also say hi."})
        followed = rpc.request({"type": "prompt", "message": "Then this.", "streamingBehavior": "followUp"})
        queued = rpc.ok({"type": "get_state"})["pendingMessageCount"]
        rpc.wait_event("agent_settled", 20)

    assert busy["success"] is False and busy["error"] == (
        "Agent is already processing. Specify streamingBehavior ('steer' or 'followUp') to queue the message."
    )
    assert steered["success"] is True and followed["success"] is True and queued == 2
    assert rpc.events("queue_update") == [
        {"type": "queue_update", "steering": ["Also say hi."], "followUp": []},
        {"type": "queue_update", "steering": ["Also say hi."], "followUp": ["Then this."]},
        {"type": "queue_update", "steering": [], "followUp": ["Then this."]},
        {"type": "queue_update", "steering": [], "followUp": []},
    ]
    kinds = rpc.types()
    assert kinds.count("agent_start") == 1 and kinds.count("agent_end") == 1  # one run: 3 turns
    assert kinds.count("turn_start") == 3
    users = [e["message"]["content"][0]["text"] for e in rpc.events("message_start") if e["message"]["role"] == "user"]
    assert users == ["Sleep a bit.", "Also say hi.", "Then this."]
    # the steer is delivered after the running tool ends, as a user message of the next turn
    tool_end = kinds.index("tool_execution_end")
    steer_start = next(
        i
        for i, e in enumerate(rpc.events())
        if e.get("type") == "message_start"
        and e["message"].get("content") == [{"type": "text", "text": "Also say hi."}]
    )
    assert tool_end < steer_start
    assert [p.last_user_text() for p in here.api.posts()] == ["Sleep a bit.", "Also say hi.", "Then this."]


def test_compact_refuses_a_tiny_session_then_summarises(pi: Pi, tmp_path: Path) -> None:
    with lab(pi, tmp_path, settings={"compaction": {"keepRecentTokens": 10}}) as here:
        here.api.push(chat.text("First answer " * 20), chat.text("Second answer " * 20))
        here.api.push(chat.text("## Goal\nScripted summary."), chat.text("Prefix summary."))
        rpc = here.spawn()
        refused = rpc.request({"type": "compact"})
        settle(rpc, "First question.")
        settle(rpc, "Second question.")
        mark = rpc.mark()
        compacted = rpc.request({"type": "compact"}, 20)
        stats = rpc.ok({"type": "get_session_stats"})
        entries = rpc.ok({"type": "get_entries"})

    assert refused["success"] is False and refused["error"] == "Nothing to compact (session too small)"
    first_events = rpc.events()[:2]
    assert first_events == [
        {"type": "compaction_start", "reason": "manual"},
        {
            "type": "compaction_end",
            "reason": "manual",
            "aborted": False,
            "willRetry": False,
            "errorMessage": "Compaction failed: Nothing to compact (session too small)",
        },
    ]
    during = [e.get("type") for e in rpc.lines[mark:]]
    assert during[:2] == ["compaction_start", "compaction_end"]  # no message events for the summary calls
    assert compacted["success"] is True
    result = compacted["data"]
    assert result["summary"] == "## Goal\nScripted summary.\n\n---\n\n**Turn Context (split turn):**\n\nPrefix summary."
    assert set(result) == {"summary", "firstKeptEntryId", "tokensBefore", "estimatedTokensAfter", "usage", "details"}
    assert result["details"] == {"readFiles": [], "modifiedFiles": []}
    (end,) = [e for e in rpc.lines[mark:] if e.get("type") == "compaction_end"]
    assert end["result"] == result and end["aborted"] is False and end["willRetry"] is False
    assert stats["contextUsage"] == {"tokens": None, "contextWindow": 128000, "percent": None}
    compaction = entries["entries"][-1]
    assert compaction["type"] == "compaction" and compaction["id"] == entries["leafId"]
    assert compaction["firstKeptEntryId"] == result["firstKeptEntryId"]
    summary_calls = here.api.posts()[2:]
    assert len(summary_calls) == 2 and all("tools" not in p.body for p in summary_calls)
    assert summary_calls[0].last_user_text().startswith("<conversation>\n[User]: First question.")
