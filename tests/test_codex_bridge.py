"""`bridges.codex` end to end against a scripted fake `codex app-server` (spec §1.2–§1.6, §2, §3.13, §4, §5).

The fake app-server answers the handshake and constructions like codex 0.171 and plays a script per turn, chosen
by the prompt text (plain answer, silence, a crash, an approval or tool-call round trip, a stalled stream). Every
line it receives is appended to a log the tests read, so what the bridge asked of codex is checked too. The
bridge runs in-process with a runtime on its stdio that assembles what it emits and answers its requests. These
cover the rules no recording exercises ([unverified]: zero-work settlement, rebuilds, child exit, missing CLI).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from bbridge.wire import rpc
from bridges.codex import bridge as codex_bridge
from bridges.codex import launch
from bridges.codex.bridge import CodexBridge
from bridges.codex.child import MISSING_CLI
from tests.support import ASK, FULL, INIT, Runtime, capabilities, in_process, turn_params

THREAD = "thr_codex"
CODEX_THREAD = "019a0000-0000-7000-8000-000000000001"
FAKE = r"""
import json, os, sys

LOG = os.environ["FAKE_CODEX_LOG"]
THREAD = "019a0000-0000-7000-8000-000000000001"
turns = 0


def log(line):
    with open(LOG, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "line": line}) + "\n")


def out(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def note(method, **params):
    out({"method": method, "params": params, "emittedAtMs": 1})


def answer(ident, result):
    out({"id": ident, "result": result})


def ask(method, params):
    out({"method": method, "id": 0, "params": params})
    line = sys.stdin.readline()
    log(json.loads(line))
    return json.loads(line)


def started(turn):
    note("turn/started", threadId=THREAD, turn={"id": turn, "status": "inProgress", "items": []})


def completed(turn, status="completed"):
    note("turn/completed", threadId=THREAD, turn={"id": turn, "status": status, "items": [], "error": None})


def message(turn, text):
    item = {"type": "agentMessage", "id": "msg_" + turn, "text": ""}
    note("item/started", threadId=THREAD, turnId=turn, item=item)
    note("item/agentMessage/delta", threadId=THREAD, turnId=turn, itemId=item["id"], delta=text)
    note("item/completed", threadId=THREAD, turnId=turn, item=dict(item, text=text))


for line in sys.stdin:
    request = json.loads(line)
    log(request)
    method, ident, params = request.get("method"), request.get("id"), request.get("params") or {}
    if method in ("initialize", "skills/extraRoots/set", "thread/name/set", "thread/archive",
                  "thread/unarchive", "thread/goal/clear", "turn/steer"):
        answer(ident, {})
    elif method == "account/rateLimits/read":
        out({"id": ident, "error": {"code": -32600, "message": "codex account authentication required"}})
    elif method == "model/list":
        answer(ident, {"data": [{"id": "gpt-5.5", "model": "gpt-5.5", "isDefault": True}], "nextCursor": None})
    elif method in ("thread/start", "thread/resume", "thread/fork"):
        if params.get("threadId") == "archived":
            out({"id": ident, "error": {"code": -32600, "message": "session archived is archived. Run `codex unarchive archived`."}})
            continue
        answer(ident, {"thread": {"id": THREAD}})
        note("thread/started", thread={"id": THREAD, "preview": ""})
    elif method == "thread/compact/start":
        answer(ident, {})
        turns += 1
        started(f"turn-{turns}")
        note("thread/compacted", threadId=THREAD, turnId=f"turn-{turns}")
        completed(f"turn-{turns}")
    elif method == "turn/interrupt":
        answer(ident, {})
        completed(params["turnId"], "interrupted")
    elif method == "turn/start":
        turns += 1
        turn = f"turn-{turns}"
        prompt = params["input"][0].get("text", "")
        answer(ident, {"turn": {"id": turn, "status": "inProgress", "items": []}})
        if prompt == "silent":
            continue
        started(turn)
        if prompt == "crash":
            sys.stderr.write("boom\n")
            sys.stderr.flush()
            sys.exit(3)
        if prompt == "stall":
            note("item/started", threadId=THREAD, turnId=turn, item={"type": "agentMessage", "id": "msg_s", "text": ""})
            continue
        if prompt == "approve":
            resolution = ask("item/commandExecution/requestApproval", {
                "threadId": THREAD, "turnId": turn, "itemId": "call_1", "command": "touch x", "cwd": "/w",
                "reason": "Create it?", "commandActions": [{"type": "unknown", "command": "touch x"}],
                "availableDecisions": ["accept", {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch"]}}, "cancel"],
            })
            message(turn, json.dumps(resolution.get("result")))
        elif prompt == "tool":
            resolution = ask("item/tool/call", {"threadId": THREAD, "turnId": turn, "callId": "c1", "tool": "lookup", "arguments": None})
            message(turn, json.dumps(resolution))
        elif prompt == "bad-tool":
            resolution = ask("item/tool/call", {"threadId": THREAD, "turnId": turn, "callId": "", "tool": "lookup"})
            message(turn, json.dumps(resolution))
        elif prompt == "legacy":
            resolution = ask("execCommandApproval", {"threadId": THREAD})
            message(turn, json.dumps(resolution))
        else:
            message(turn, "Hello")
        completed(turn)
    elif ident is not None:
        out({"id": ident, "error": {"code": -32601, "message": "unknown " + str(method)}})
"""


class Fake:
    """The fake app-server's environment and the log of what it received."""

    def __init__(self, tmp_path: Path) -> None:
        self.script = tmp_path / "fake_codex.py"
        self.script.write_text(FAKE)
        self.log = tmp_path / "codex.log"
        self.env = {
            "PATH": "/usr/bin:/bin",
            "FAKE_CODEX_LOG": str(self.log),
            launch.COMMAND_ENV: sys.executable,
            launch.ARGS_ENV: json.dumps([str(self.script)]),
        }

    def received(self) -> list[tuple[int, dict[str, Any]]]:
        if not self.log.exists():
            return []
        entries = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [(entry["pid"], entry["line"]) for entry in entries]

    def methods(self) -> list[str]:
        return [line["method"] for _, line in self.received() if "method" in line]


@pytest.fixture
def fake(tmp_path: Path) -> Fake:
    return Fake(tmp_path)


@asynccontextmanager
async def running(env: dict[str, str]) -> AsyncIterator[Runtime]:
    """The bridge in-process, initialized, with the bridge's requests allowed by default; bounded."""
    with trio.fail_after(30):  # a stuck bridge fails the test instead of hanging it
        async with in_process(CodexBridge(env).bridge) as runtime:
            runtime.resolution = {"decision": "allow_once", "grantedPermissions": None}
            await runtime.call("initialize", INIT)
            yield runtime


def start(cwd: Path, options: dict[str, Any] = FULL, method_params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"threadId": THREAD, "cwd": str(cwd), "options": options, **(method_params or {})}


def turn(text: str, creq: str = "creq_2222222222", options: dict[str, Any] = FULL) -> dict[str, Any]:
    return turn_params(THREAD, CODEX_THREAD, text, creq, options)


def settled(runtime: Runtime, count: int = 1) -> bool:
    return runtime.types(THREAD).count("turn/completed") >= count


async def test_handshake_construction_and_a_turn(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        assert runtime.log[0] == ("answer", "initialize", {"protocolVersion": 2, "capabilities": capabilities(
            sessionRestore=True, threadArchive=True, threadRename=True, threadGoalClear=True, fork="checkpoint",
            approvalEnforcedBy="runtime", steerMode="inject")})  # fmt: skip
        result = await runtime.call("thread/start", start(tmp_path))
        assert result == {"providerThreadId": CODEX_THREAD, "sessionRestorable": True}
        assert await runtime.call("turn/start", turn("hi")) == {"threadId": THREAD}
        await runtime.wait_until(lambda: settled(runtime))
        messages = [e for e in runtime.events[THREAD] if e["type"] == "item/completed"]
        assert messages[-1]["item"]["text"] == "Hello"
        order = [(kind, name) for kind, name, _ in runtime.log[1:4]]
        assert order == [("note", "thread/identity"), ("note", "thread/delta"), ("answer", "thread/start")]
    # no `initialized` notification; rate limits read (and refused) before the construction
    assert fake.methods() == ["initialize", "account/rateLimits/read", "thread/start", "turn/start"]
    sent = dict((line["method"], line) for _, line in fake.received())
    assert sent["thread/start"]["params"]["config"]["shell_environment_policy.set.BB_THREAD_ID"] == THREAD
    assert sent["turn/start"]["params"]["sandboxPolicy"] == {"type": "dangerFullAccess"}


async def test_skill_roots_reach_new_and_live_children(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        roots = {"roots": [{"id": "r1", "path": "/skills/a", "skills": []}]}
        assert await runtime.call("skills/configure", roots) == {"ok": True}
        await runtime.call("thread/start", start(tmp_path))
        roots["roots"][0]["path"] = "/skills/b"
        assert await runtime.call("skills/configure", roots) == {"ok": True}
    sets = [line["params"] for _, line in fake.received() if line.get("method") == "skills/extraRoots/set"]
    assert sets == [{"extraRoots": ["/skills/a"]}, {"extraRoots": ["/skills/b"]}]
    assert fake.methods()[:4] == ["initialize", "account/rateLimits/read", "skills/extraRoots/set", "thread/start"]


async def test_a_turn_codex_never_starts_settles_as_zero_work(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        await runtime.call("thread/start", start(tmp_path))
        await runtime.call("turn/start", turn("silent", creq="creq_9999999999"))
        await runtime.wait_until(lambda: settled(runtime))
        zero = runtime.deltas[THREAD][-3:]
        assert [msgspec.to_builtins(d) for d in zero] == [
            {"kind": "turn.open", "providerTurnId": "zero-work-1"},
            {"kind": "input.accepted", "clientRequestId": "creq_9999999999", "providerTurnId": "zero-work-1"},
            {"kind": "turn.boundary", "status": "completed", "providerTurnId": "zero-work-1"},
        ]
        await runtime.call("turn/start", turn("hi", creq="creq_8888888888"))
        await runtime.wait_until(lambda: settled(runtime, 2))
        assert "zero-work-2" not in json.dumps(msgspec.to_builtins(runtime.deltas[THREAD]))


async def test_a_child_exit_fails_the_turn_and_the_next_turn_rebuilds(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        await runtime.call("thread/start", start(tmp_path))
        await runtime.call("turn/start", turn("crash", creq="creq_7777777777"))
        await runtime.wait_until(lambda: bool(runtime.notes("error")))
        message = "codex app-server exited unexpectedly (code 3, signal null): boom"
        assert runtime.notes("error") == [{"threadId": THREAD, "providerThreadId": CODEX_THREAD, "message": message}]
        failed = [e for e in runtime.events[THREAD] if e["type"] == "turn/completed"]
        assert failed[-1]["status"] == "failed"
        assert failed[-1]["error"]["message"] == message
        await runtime.call("turn/start", turn("hi", creq="creq_4444444444"))
        await runtime.wait_until(lambda: settled(runtime, 2))
        assert runtime.notes("session/replaced") == [
            {
                "threadId": THREAD,
                "providerThreadId": CODEX_THREAD,
                "reason": codex_bridge.CHILD_GONE,
                "contextLost": False,
            }
        ]
        names = [name for kind, name, _ in runtime.log if kind == "note"]
        replaced = names.index("session/replaced")
        assert names[replaced : replaced + 3] == ["session/replaced", "thread/identity", "thread/delta"]
    resumes = [line for _, line in fake.received() if line.get("method") == "thread/resume"]
    assert resumes[0]["params"]["threadId"] == CODEX_THREAD
    assert "shell_environment_policy.set.BB_THREAD_ID" in resumes[0]["params"]["config"]


async def test_changed_execution_settings_rebuild_the_session(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        await runtime.call("thread/start", start(tmp_path))
        await runtime.call("turn/start", turn("hi", creq="creq_3333333333"))
        await runtime.wait_until(lambda: settled(runtime))
        await runtime.call("turn/start", turn("hi", creq="creq_5555555555", options=ASK))
        await runtime.wait_until(lambda: settled(runtime, 2))
        assert [n["reason"] for n in runtime.notes("session/replaced")] == [codex_bridge.SETTINGS_CHANGED]
        await runtime.call("turn/start", turn("hi", creq="creq_6666666666", options={**ASK, "model": "gpt-5.5"}))
        await runtime.wait_until(lambda: settled(runtime, 3))
        assert len(runtime.notes("session/replaced")) == 1  # the model is not part of the signature
    resumes = [line["params"] for _, line in fake.received() if line.get("method") == "thread/resume"]
    assert [(r["approvalPolicy"], r["sandbox"]) for r in resumes] == [("on-request", "workspace-write")]


@pytest.mark.parametrize(
    ("decision", "answer"), [("allow_once", "accept"), ("allow_for_session", "acceptForSession"), ("deny", "decline")]
)
async def test_command_approval_round_trip(fake: Fake, tmp_path: Path, decision: str, answer: str) -> None:
    async with running(fake.env) as runtime:
        runtime.resolution = {"decision": decision, "grantedPermissions": None}
        await runtime.call("thread/start", start(tmp_path, ASK))
        await runtime.call("turn/start", turn("approve", options=ASK))
        await runtime.wait_until(lambda: settled(runtime))
        [(method, params)] = runtime.requests
        assert method == "interaction/request"
        assert params["payload"]["availableDecisions"] == ["allow_once", "deny"]
        assert params["payload"]["subject"]["command"] == "touch x"
    answers = [line for _, line in fake.received() if line.get("id") == 0 and "method" not in line]
    assert answers == [{"jsonrpc": "2.0", "id": 0, "result": {"decision": answer}}]


async def test_a_runtime_error_is_relayed_to_codex(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        runtime.resolution = rpc.RpcError(-32000, "no host handler")
        await runtime.call("thread/start", start(tmp_path, ASK))
        await runtime.call("turn/start", turn("approve", options=ASK))
        await runtime.wait_until(lambda: settled(runtime))
    answers = [line for _, line in fake.received() if line.get("id") == 0 and "method" not in line]
    assert answers == [{"jsonrpc": "2.0", "id": 0, "error": {"code": -32000, "message": "no host handler"}}]


async def test_dynamic_tool_calls_go_to_the_runtime_and_back(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        runtime.resolution = {"contentItems": [{"type": "inputText", "text": "42"}], "success": True}
        await runtime.call("thread/start", start(tmp_path))
        await runtime.call("turn/start", turn("tool"))
        await runtime.wait_until(lambda: settled(runtime))
        assert runtime.requests == [
            (
                "item/tool/call",
                {
                    "providerThreadId": CODEX_THREAD,
                    "threadId": THREAD,
                    "turnId": "turn-1",
                    "callId": "c1",
                    "tool": "lookup",
                    "arguments": {},
                    "providerNativeIds": True,
                },
            )
        ]
    answers = [line for _, line in fake.received() if line.get("id") == 0 and "method" not in line]
    assert answers == [{"jsonrpc": "2.0", "id": 0, "result": runtime.resolution}]


@pytest.mark.parametrize(
    ("prompt", "error"),
    [
        ("bad-tool", {"code": -32602, "message": "Invalid codex tool call params: callId: expected non-empty string"}),
        ("legacy", {"code": -32601, "message": 'Unhandled codex request "execCommandApproval"'}),
    ],
)
async def test_requests_the_bridge_cannot_serve_are_refused(
    fake: Fake, tmp_path: Path, prompt: str, error: dict[str, Any]
) -> None:
    async with running(fake.env) as runtime:
        await runtime.call("thread/start", start(tmp_path))
        await runtime.call("turn/start", turn(prompt))
        await runtime.wait_until(lambda: settled(runtime))
        assert runtime.requests == []
    answers = [line for _, line in fake.received() if line.get("id") == 0 and "method" not in line]
    assert answers == [{"jsonrpc": "2.0", "id": 0, "error": error}]


async def test_interrupt_asks_codex_and_its_boundary_settles_the_turn(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        await runtime.call("thread/start", start(tmp_path))
        await runtime.call("turn/start", turn("stall"))
        await runtime.wait_until(lambda: "turn/started" in runtime.types(THREAD))
        stop = {"threadId": THREAD, "providerThreadId": CODEX_THREAD, "intent": "interrupt", "activeTurnId": None}
        assert await runtime.call("thread/stop", stop) == {"ok": True}  # no active turn named: nothing to do
        assert await runtime.call("thread/stop", {**stop, "activeTurnId": "turn-1"}) == {"ok": True}
        assert settled(runtime)  # codex's interrupted boundary went out before the answer (protocol.md §3.3.10)
        assert [e for e in runtime.events[THREAD] if e["type"] == "turn/completed"][-1]["status"] == "interrupted"
    interrupts = [line["params"] for _, line in fake.received() if line.get("method") == "turn/interrupt"]
    assert interrupts == [{"threadId": CODEX_THREAD, "turnId": "turn-1"}]


async def test_a_standalone_compact_command_compacts_the_thread(fake: Fake, tmp_path: Path) -> None:
    mention = {
        "start": 0,
        "end": 8,
        "resource": {
            "kind": "command", "trigger": "/", "name": "compact", "source": "command", "origin": "builtin",
            "label": "compact", "argumentHint": None,
        },
    }  # fmt: skip
    async with running(fake.env) as runtime:
        await runtime.call("thread/start", start(tmp_path))
        compact = {**turn("/compact "), "input": [{"type": "text", "text": "/compact ", "mentions": [mention]}]}
        await runtime.call("turn/start", compact)
        await runtime.wait_until(lambda: settled(runtime))
        assert "context.compacted" in runtime.kinds(THREAD)
    assert "turn/start" not in fake.methods()
    assert [line["params"] for _, line in fake.received() if line.get("method") == "thread/compact/start"] == [
        {"threadId": CODEX_THREAD}
    ]


async def test_a_steer_is_accepted_before_its_answer(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        await runtime.call("thread/start", start(tmp_path))
        idle = await runtime.error("turn/steer", {**turn("too early"), "expectedTurnId": "turn-0"})
        assert (idle.code, idle.message) == (-32001, f'No active codex turn for thread "{THREAD}"')
        await runtime.call("turn/start", turn("stall"))
        await runtime.wait_until(lambda: "turn/started" in runtime.types(THREAD))
        steer = {**turn("also this", creq="creq_aaaaaaaaaa"), "expectedTurnId": "turn-1"}
        assert await runtime.call("turn/steer", steer) == {"threadId": THREAD}
        accepted = [i for i, (kind, name, params) in enumerate(runtime.log) if name == "thread/delta"][-1]
        assert runtime.log[accepted][2]["deltas"] == [
            {"kind": "input.accepted", "clientRequestId": "creq_aaaaaaaaaa", "providerTurnId": "turn-1"}
        ]
        assert runtime.log[accepted + 1][:2] == ("answer", "turn/steer")
    steers = [line["params"] for _, line in fake.received() if line.get("method") == "turn/steer"]
    assert steers == [
        {"threadId": CODEX_THREAD, "expectedTurnId": "turn-1", "input": [{"type": "text", "text": "also this", "text_elements": []}]}
    ]  # fmt: skip


CODEX_BINARY = """#!{python}
import json, os, runpy, sys
with open(os.environ["FAKE_CODEX_ARGV"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:] != ["app-server"]:  # what codex does without its subcommand: the interactive TUI
    sys.exit("Error: stdin is not a terminal")
sys.argv = [{script!r}]
runpy.run_path({script!r}, run_name="__main__")
"""


async def test_a_command_without_arguments_runs_as_the_app_server(fake: Fake, tmp_path: Path) -> None:
    """Issue 31: `BB_CODEX_BRIDGE_APP_SERVER_COMMAND` alone names a codex binary; it gets `app-server` (the spec's
    bare command started codex's TUI, which died on `stdin is not a terminal` with a Rust backtrace)."""
    binary = tmp_path / "codex"
    binary.write_text(CODEX_BINARY.format(python=sys.executable, script=str(fake.script)))
    binary.chmod(0o755)
    record = tmp_path / "argv.log"
    env = {k: v for k, v in fake.env.items() if k != launch.ARGS_ENV}
    env |= {launch.COMMAND_ENV: str(binary), "FAKE_CODEX_ARGV": str(record)}
    async with running(env) as runtime:
        assert (await runtime.call("thread/start", start(tmp_path)))["providerThreadId"] == CODEX_THREAD
        assert await runtime.call("turn/start", turn("hi")) == {"threadId": THREAD}
    assert [json.loads(line) for line in record.read_text().splitlines()] == [["app-server"]]


async def test_a_missing_codex_is_explained(fake: Fake, tmp_path: Path) -> None:
    env = {**fake.env, launch.COMMAND_ENV: str(tmp_path / "no-such-codex"), launch.ARGS_ENV: ""}
    async with running(env) as runtime:
        error = await runtime.error("thread/start", start(tmp_path))
        assert (error.code, error.message) == (-32000, MISSING_CLI)
        spawn = f"spawn {tmp_path / 'no-such-codex'} ENOENT"
        message = f"codex app-server exited unexpectedly (code null, signal null): {spawn}"
        assert runtime.notes("error") == [{"threadId": THREAD, "message": message}]
        error = await runtime.error("model/list", {})
        assert (error.code, error.message) == (-32000, MISSING_CLI)
        ref = {"threadId": THREAD, "providerThreadId": CODEX_THREAD}
        error = await runtime.error("thread/archive", ref)
        assert (error.code, error.message) == (-32000, MISSING_CLI)


async def test_an_archived_rollout_is_not_restorable(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        error = await runtime.error("thread/resume", start(tmp_path, method_params={"providerThreadId": "archived"}))
        assert error.code == -32002
        assert error.message.startswith("session archived is archived.")
        names = [name for kind, name, _ in runtime.log if kind == "note"]
        assert names == ["thread/identity", "thread/delta"]  # identity and reset, never retracted
        error = await runtime.error("turn/start", turn("hi"))
        assert error.message == f'No active codex session for thread "{THREAD}"'


async def test_unsupported_reasoning_levels_are_refused(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        error = await runtime.error("thread/start", start(tmp_path, {**FULL, "reasoningLevel": "none"}))
        assert error.message == "Codex does not support the none reasoning level."
    assert "thread/start" not in fake.methods()


async def test_thread_refs_use_the_live_child_or_a_one_shot_child(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        ref = {"threadId": THREAD, "providerThreadId": CODEX_THREAD}
        assert await runtime.call("thread/unarchive", ref) == {"ok": True}  # no session: a maintenance child
        await runtime.call("thread/start", start(tmp_path))
        assert await runtime.call("thread/name/set", {**ref, "title": "Named"}) == {"ok": True}
        assert await runtime.call("thread/goal/clear", ref) == {"cleared": True}
        assert await runtime.call("thread/discard", ref) == {"ok": True}  # archives and releases
        error = await runtime.error("turn/start", turn("hi"))
        assert error.message == f'No active codex session for thread "{THREAD}"'
    by_pid: dict[int, list[str]] = {}
    for pid, line in fake.received():
        if "method" in line:
            by_pid.setdefault(pid, []).append(line["method"])
    maintenance, session = by_pid.values()
    assert maintenance == ["initialize", "thread/unarchive"]
    assert session[-3:] == ["thread/name/set", "thread/goal/clear", "thread/archive"]
    names = [line["params"] for _, line in fake.received() if line.get("method") == "thread/name/set"]
    assert names == [{"threadId": CODEX_THREAD, "name": "Named"}]


async def test_model_list_uses_one_cached_child(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        first = await runtime.call("model/list", {})
        assert await runtime.call("model/list", {"cwd": str(tmp_path)}) == first
        assert first["models"][0]["id"] == "gpt-5.5" and first["models"][0]["isDefault"] is True
    pids = {pid for pid, line in fake.received()}
    assert len(pids) == 1
    assert [line["params"] for _, line in fake.received() if line.get("method") == "model/list"] == [{}, {}]


async def test_params_failing_their_schema_are_refused(fake: Fake, tmp_path: Path) -> None:
    async with running(fake.env) as runtime:
        error = await runtime.error("thread/start", {"threadId": THREAD, "cwd": str(tmp_path)})
        assert error.code == -32602
        assert error.message.startswith('Invalid params for "thread/start": ')
        error = await runtime.error("turn/start", turn("hi"))
        assert error.message == f'No active codex session for thread "{THREAD}"'


async def test_unknown_methods_are_refused_in_the_references_words(fake: Fake) -> None:
    async with running(fake.env) as runtime:
        error = await runtime.error("thread/rewind", {})
        assert (error.code, error.message, error.data) == (-32601, 'Unknown method "thread/rewind"', None)


async def test_maintenance_methods_are_served(fake: Fake, tmp_path: Path) -> None:
    env = {**fake.env, "PATH": str(tmp_path), "CODEX_HOME": str(tmp_path)}  # no codex on PATH
    async with running(env) as runtime:
        health = await runtime.call("provider/health", {"providerId": "codex"})
        assert health["supported"] is True and health["health"]["status"] == "not_installed"
        status = await runtime.call("provider/installation/status", {"providerId": "codex"})
        assert status["installed"] is False and status["installAction"]["kind"] == "install"
