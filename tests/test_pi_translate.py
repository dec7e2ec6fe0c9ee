"""The pi bridge's pure parts on inputs no recording holds (pi-bridge.md [code-only] rules), the model list
against the recorded cell with pi-ai's own Model objects, and the builtin catalog against the pinned package."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bbridge.core import grammar as g
from bbridge.kit import encode_deltas
from bridges.pi import catalog, fork, launch, models
from bridges.pi.translate import Translator, classify, result_text
from tests.conftest import shared_path
from tests.live.pi import ensure_pi

T = "thr_1"


def deltas(translator: Translator, event: Any, checkpoint: str | None = None) -> list[dict[str, Any]]:
    out = translator.event(T, event, checkpoint)
    return json.loads(encode_deltas(T, out))["deltas"] if out else []


def assistant(text: str = "", **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}] if text else [], **extra}


def test_an_invalid_payload_is_unhandled_from_its_fallback() -> None:  # [T5]
    (delta,) = deltas(Translator(), {"type": "tool_execution_end", "toolCallId": "c", "toolName": "bash"})
    assert delta["kind"] == "unhandled" and delta["rawType"] == "sdk/tool_execution_end"
    assert delta["raw"]["params"] == {
        "threadId": T,
        "message": {"type": "tool_execution_end", "toolCallId": "c", "toolName": "bash"},
    }
    (delta,) = deltas(
        Translator(), {"type": "message_update", "assistantMessageEvent": {"type": "thinking_delta", "delta": "x"}}
    )
    assert delta["kind"] == "unhandled" and delta["rawType"] == "sdk/message_update:thinking_delta"  # no index


def test_unknown_events_and_roles_are_unhandled_noise_is_not() -> None:  # [V1], [V4]
    t = Translator()
    assert deltas(t, {"type": "turn_start"}) == [] and deltas(t, {"type": "agent_settled"}) == []
    assert deltas(t, {"type": "message_start", "message": {"role": "user", "content": []}}) == []
    (custom,) = deltas(t, {"type": "message_start", "message": {"role": "custom", "content": []}})
    assert custom["rawType"] == "sdk/message_start"
    (entry,) = deltas(t, {"type": "entry_appended"})
    assert entry["rawType"] == "sdk/unknown" and list(entry["raw"]["params"]) == ["message", "threadId"]
    (other,) = deltas(t, {"type": "message_update", "assistantMessageEvent": {"type": "citation"}})
    assert other["rawType"] == "sdk/message_update"


def test_tool_shapes_and_their_fallbacks() -> None:  # [T13], §4.6
    assert classify("bash", {"command": ""}) == g.ToolShape(tool="bash", args={"command": ""})
    assert classify("write", {"path": "a", "content": "x"}) == g.FileChangeShape(
        changes=[g.FileChangeEntry(path="a", kind="add", newText="x")]
    )
    assert classify("edit", {"path": "a", "oldText": "o", "newText": "n"}) == g.FileChangeShape(
        changes=[g.FileChangeEntry(path="a", kind="update", oldText="o", newText="n")]
    )
    assert classify("edit", {"path": 3}) == g.ToolShape(tool="edit", args={"path": 3})
    assert classify("write", {"path": "a", "content": 1}) == g.ToolShape(tool="write", args={"path": "a", "content": 1})
    t = Translator()
    (close,) = deltas(
        t, {"type": "tool_execution_end", "toolCallId": "x", "toolName": "write", "result": "ok", "isError": False}
    )
    assert close["item"] == {"type": "fileChange", "changes": []}  # never seen started
    (progress,) = deltas(
        t, {"type": "tool_execution_update", "toolCallId": "y", "toolName": "read", "partialResult": {"content": []}}
    )
    assert progress == {"kind": "item.progress", "key": {"providerItemId": "y"}, "message": "read progress update",
                        "noTurnFallback": progress["noTurnFallback"]}  # fmt: skip  # [T15]


def test_a_declared_tools_presentation_is_on_its_items_and_no_other_tools() -> None:  # protocol.md DynamicTool
    shown = g.Presentation(label=g.Label(pending="Looking up", completed="Looked up"), icon=g.Icon(glyph="Search"))
    t = Translator()
    t.reset(T, {"lookup": shown})
    for tool in ("lookup", "read"):
        (opened,) = deltas(t, {"type": "tool_execution_start", "toolCallId": tool, "toolName": tool, "args": {}})
        end = {"type": "tool_execution_end", "toolCallId": tool, "toolName": tool, "result": "ok", "isError": False}
        (closed,) = deltas(t, end)
        expected = msgspec.to_builtins(shown) if tool == "lookup" else None
        assert opened.get("presentation") == closed.get("presentation") == expected, tool
    t.reset(T)  # a later construction declaring no tool: nothing stamped
    (opened,) = deltas(t, {"type": "tool_execution_start", "toolCallId": "c", "toolName": "lookup", "args": {}})
    assert "presentation" not in opened


def test_result_text() -> None:  # [T27]
    assert (
        result_text([{"type": "tool_reference", "tool_name": "a"}, {"type": "tool_reference", "tool_name": "b"}])
        == "Matched tools: a, b"
    )
    assert (
        result_text([{"type": "text", "text": "t"}, {"type": "image", "url": "u"}, {"type": "x"}])
        == "t\n[image: u]\n[x]"
    )
    assert result_text({"a": 1}) == '{"a":1}' and result_text(2.0) == "2" and result_text(None) == ""


def test_agent_end_retry_error_and_aborted() -> None:  # [T17], [T18], [T19]
    t = Translator()
    t.reset(T)
    failed = assistant(stopReason="error", errorMessage="500: boom")
    assert deltas(t, {"type": "agent_end", "messages": [failed], "willRetry": True}) == [
        {"kind": "provider.error", "message": "Provider error", "detail": "500: boom", "willRetry": True}
    ]
    assert deltas(t, {"type": "agent_end", "messages": [failed]}) == [
        {"kind": "provider.error", "message": "Provider error", "detail": "500: boom", "settlesTurn": True}
    ]
    aborted = assistant(" partial ", stopReason="aborted", usage={"input": 3, "output": 1, "cacheRead": 2})
    out = deltas(t, {"type": "agent_end", "messages": [aborted]}, "abcd1234")
    assert [d["kind"] for d in out] == ["item.textClose", "usage", "turn.boundary"]
    assert (
        out[0]["text"] == "partial" and out[1]["last"]["cachedInputTokens"] == 2 and out[1]["last"]["totalTokens"] == 6
    )
    assert out[1]["modelContextWindow"] is None and out[2]["providerCheckpointId"] == "abcd1234"
    again = deltas(t, {"type": "agent_end", "messages": [aborted]})
    assert again[1]["total"]["inputTokens"] == 6  # the running total ([T21])
    assert deltas(t, {"type": "agent_end", "messages": []}) == [
        {"kind": "turn.boundary", "status": "completed", "claimIfIdle": True}
    ]


def test_compaction_variants() -> None:  # [T28]–[T30]
    t = Translator()
    auto = deltas(t, {"type": "compaction_start", "reason": "threshold"})
    assert [d["kind"] for d in auto] == ["item.open"] and auto[0]["attach"] == "currentOrLast"
    assert [d["kind"] for d in deltas(t, {"type": "compaction_end", "reason": "overflow", "aborted": False})] == [
        "context.compacted"
    ]
    assert deltas(t, {"type": "compaction_end", "reason": "threshold", "aborted": True}) == [
        {
            "kind": "provider.error",
            "message": "Context compaction interrupted",
            "detail": "Automatic context compaction was interrupted",
        }
    ]
    manual = deltas(t, {"type": "compaction_end", "reason": "manual", "aborted": False})
    assert [d["kind"] for d in manual] == ["context.compacted", "turn.boundary"]
    failed = deltas(t, {"type": "compaction_end", "reason": "manual", "aborted": False, "errorMessage": "nope"})
    assert failed == [{"kind": "turn.boundary", "status": "failed", "error": {"message": "nope"}}]


def test_bridge_originated_inputs() -> None:  # [T24]–[T26]
    t = Translator()
    assert json.loads(encode_deltas(T, t.settled(T, "failed", "x")))["deltas"] == [
        {"kind": "turn.boundary", "status": "failed", "error": {"message": "x"}, "claimIfIdle": True}
    ]
    assert json.loads(encode_deltas(T, t.context_window({"tokens": None, "contextWindow": 0})))["deltas"] == [
        {"kind": "contextWindow", "used": None, "size": None, "estimated": True, "attach": "currentOrLast"}
    ]
    assert t.context_window(None) == []
    assert json.loads(encode_deltas(T, t.error(T, None)))["deltas"][0]["detail"] == "unknown error"


def test_shell_overrides_and_session_files() -> None:  # [F2], [F8]
    assert launch.shell_overrides("thr_a", {"OK_1": "x", "9BAD": "y", "bad-name": "z"}) == {
        "BB_THREAD_ID": "thr_a",
        "OK_1": "x",
    }
    assert launch.session_file({"BB_PI_BRIDGE_SESSION_DIR": "/s"}, "thr/a b").name == "thr_a_b.jsonl"
    env = launch.child_env(
        {"BB_SECRET": "1", "PATH": "/bin", "ELECTRON_RUN_AS_NODE": "1"}, {"BB_THREAD_ID": "t"}, ["ELECTRON_RUN_AS_NODE"]
    )
    assert env == {"PATH": "/bin", "BB_THREAD_ID": "t", "PI_OFFLINE": "1"}


def test_a_checkpoint_fork_keeps_the_branch_to_its_entry(tmp_path: Path) -> None:  # [M11]
    source, target = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    lines = [{"type": "session", "version": 3, "id": "s", "cwd": "/w"},
             {"type": "message", "id": "1", "parentId": None}, {"type": "label", "id": "L", "parentId": "1"},
             {"type": "message", "id": "2", "parentId": "L"}, {"type": "message", "id": "3", "parentId": "2"}]  # fmt: skip
    source.write_text("".join(json.dumps(x) + "\n" for x in lines))
    fork.fork_file(source, target, "a", "/w", "2")
    header, *entries = [json.loads(x) for x in target.read_text().splitlines()]
    assert header["parentSession"] == str(source) and header["id"] != "s"
    assert [(e["id"], e["parentId"]) for e in entries] == [("1", None), ("2", "1")]
    with pytest.raises(fork.ForkError, match='source pi session file not found for thread "gone"'):
        fork.fork_file(tmp_path / "gone.jsonl", target, "gone", "/w", None)


def pi_ai_models(provider: str) -> list[dict[str, Any]]:
    """pi-ai's own builtin Model objects of one provider, from the pinned package."""
    pi = ensure_pi()
    script = (
        "const m = await import(process.argv[1]); console.log(JSON.stringify(Object.values(m.MODELS[process.argv[2]])))"
    )
    source = pi.cli.parents[2] / "pi-ai" / "dist" / "models.generated.js"
    done = subprocess.run([str(pi.node), "--input-type=module", "-e", script, str(source), provider],
                          capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    found: list[dict[str, Any]] = json.loads(done.stdout)
    return found


def test_the_model_list_matches_the_recorded_cell() -> None:  # [M4], [M5]
    cell = shared_path("recordings", "pi", "model-list")
    if cell is None:
        pytest.skip("the pi recordings are not in ../shared")
    results = []
    for line in (cell / "bridge→runtime.current.ndjson").read_text().splitlines():
        message = json.loads(json.loads(line)["line"])
        if isinstance(message.get("result"), dict) and "models" in message["result"]:
            results.append(message["result"])
    recorded = results[0]
    wanted = {m["id"].split("/", 1)[1] for m in recorded["models"]}
    available = [m for m in pi_ai_models("openai-codex") if m["id"] in wanted]  # the recording machine's auth
    listed, skipped = models.model_list(
        sorted(available, key=lambda m: [e["id"] for e in recorded["models"]].index(f"openai-codex/{m['id']}"))
    )
    assert listed == recorded and skipped == []
    assert models.model_list([{"id": "x", "provider": "p"}, {"id": "m-20250101", "provider": "p", "name": "M"}]) == (
        {"models": [], "selectedOnlyModels": [models.entry({"id": "m-20250101", "provider": "p", "name": "M"})]},
        ["p"],
    )


def test_the_catalog_is_the_pinned_packages() -> None:  # [T22]
    pi = ensure_pi()
    from tools.pi_catalog import generate

    assert generate(pi.cli.parents[4]) == catalog.windows()
    assert catalog.context_window("openai-codex", "gpt-5.6-sol") == 272000
    assert catalog.context_window("scripted", "scripted-model") is None


def test_the_generated_extension_is_valid_javascript(tmp_path: Path) -> None:
    """The tool extension parses as an ES module under the pinned node (its behaviour is the live tests')."""
    pi = ensure_pi()
    from bbridge.kit.mcp_host import McpHost, Tool
    from bridges.pi import dynamic_tools

    host = McpHost({"t": Tool("t", "d", {"type": "object"})}, lambda name, args: None)  # type: ignore[arg-type,return-value]
    host.path = str(tmp_path / "s.sock")
    path = dynamic_tools.write_extension(tmp_path, host)
    assert path.stat().st_mode & 0o777 == 0o600
    check = subprocess.run([str(pi.node), "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    (config,) = [line for line in path.read_text().splitlines() if line.startswith("const CONFIG = ")]
    assert msgspec.json.decode(config.removeprefix("const CONFIG = ").removesuffix(";"))["tools"][0]["name"] == "t"
