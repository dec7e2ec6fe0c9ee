"""The pinned Claude Code CLI, run headless and fully offline against `tests.live.anthropic`.

* `CLAUDE`: the native binary `make live-agents` installs; `ensure_cli()` runs that target (skipping the calling
  test only when the npm registry is unreachable).
* `offline_env(api_url, home)`: the whole environment of the child (nothing is inherited but `PATH`).
* `launch_args(...)`: the command line the reference bridge uses (claude-code-bridge.md §1.4).
* `Claude`: one CLI child. Writes stream-json lines to its stdin (the `initialize` control request, user
  messages, control responses, an `interrupt`), reads its stdout as JSON lines in a background thread, answers
  `hook_callback` (`{"continue":true}`) and `mcp_message` requests itself and leaves every other CLI
  `control_request` (e.g. `can_use_tool`) to the test. Every wait has a timeout; `close()` (the context exit)
  kills the child's whole process group if it does not exit within the grace period.

    with serving() as api, Claude.start(api.url, tmp_path) as cli:
        cli.initialize()
        cli.user("hi")
        result = cli.until_result()
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from bridges.claude_code.child import HOOK_EVENTS  # the seven hooks the reference registers (§2.2)
from tests.live import runner
from tests.support import make_or_skip

CLAUDE_CODE_VERSION = "2.1.332"
CLAUDE = runner.LIVE_MODULES / "@anthropic-ai" / "claude-code-linux-x64" / "claude"
MODEL = "claude-sonnet-4-5"
API_KEY = "sk-ant-api03-live-test-0000000000000000"
# The flag-tier settings every recorded full-access session of the reference passed (§1.4 row 16).
SETTINGS = {"autoMemoryEnabled": True, "enableWorkflows": True, "ultracode": False}

Message = dict[str, Any]


def ensure_cli() -> Path:
    """`make -s live-agents`, then the CLI path. Skips only when npm's registry cannot be reached."""
    make_or_skip("live-agents", "the live agent CLIs")
    if not os.access(CLAUDE, os.X_OK):
        pytest.fail(f"make live-agents succeeded but {CLAUDE} is not an executable")
    return CLAUDE


def offline_env(
    api_url: str, home: Path, *, api_key: str = API_KEY, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The CLI's whole environment: a private HOME, the scripted API, no non-essential traffic, no retries.

    Built from scratch (only `PATH` is inherited) so no credential or setting of the host leaks in.
    """
    env = {
        **runner.offline_env(home, path=os.environ.get("PATH", runner.SYSTEM_PATH)),
        "SHELL": "/bin/bash",
        "TMPDIR": str(home / "tmp"),
        "ANTHROPIC_BASE_URL": api_url,
        "ANTHROPIC_API_KEY": api_key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "IS_SANDBOX": "1",  # tests run as root; the CLI refuses some modes as root outside a sandbox
        "CLAUDE_CODE_ENTRYPOINT": "cli",  # what the reference bridge sets (§1.5 step 3)
        # A tripwire: any HTTP(S) the CLI would send elsewhere goes as a proxy request to the scripted server,
        # which records and refuses it (`Request.is_proxy_attempt`); loopback is exempt.
        "HTTPS_PROXY": api_url,
        "HTTP_PROXY": api_url,
    }
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    return {**env, **(extra or {})}


def launch_args(
    *,
    model: str | None = MODEL,
    effort: str | None = None,
    permission_mode: str = "default",
    session_id: str | None = None,
    resume: str | None = None,
    partial: bool = True,
    settings: dict[str, Any] | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The reference's argv (§1.4), in its order; `effort` adds `--thinking adaptive --thinking-display summarized
    --effort <effort>`. A fresh session gets `--session-id` (minted when neither it nor `resume` is given)."""
    args = ["--output-format", "stream-json", "--verbose", "--input-format", "stream-json"]
    if effort is not None:
        args += ["--thinking", "adaptive", "--thinking-display", "summarized", "--effort", effort]
    if model:
        args += ["--model", model]
    args += ["--permission-prompt-tool", "stdio"]
    if resume is not None:
        args += ["--resume", resume]
    args += ["--setting-sources=user,project,local", "--permission-mode", permission_mode]
    if partial:
        args += ["--include-partial-messages"]
    if resume is None:
        args += ["--session-id", session_id or str(uuid.uuid4())]
    args += ["--settings", json.dumps(SETTINGS if settings is None else settings, separators=(",", ":"))]
    return [*args, *extra]


def initialize_request(
    *, hooks: bool = True, mcp_servers: Sequence[str] = (), append_system_prompt: str | None = None
) -> dict[str, Any]:
    """The body of the `initialize` control request, shaped as the reference sends it (§2.2)."""
    body: dict[str, Any] = {"subtype": "initialize"}
    if hooks:
        body["hooks"] = {name: [{"hookCallbackIds": [f"hook_{i}"]}] for i, name in enumerate(HOOK_EVENTS)}
    else:
        body["hooks"] = {}
    if mcp_servers:
        body["sdkMcpServers"] = list(mcp_servers)
    if append_system_prompt:
        body["appendSystemPrompt"] = append_system_prompt
    return body


@dataclass(frozen=True)
class McpTool:
    """A tool of the in-process SDK MCP server the driver emulates (its calls answer `result` as text)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    result: str = "ok"


class CliExited(Exception):
    """The CLI's stdout ended while a message was awaited."""


class Claude:
    """One headless CLI child on stream-json stdio. Thread-safe writes; reads only through the waits below."""

    def __init__(
        self,
        argv: Sequence[str],
        env: dict[str, str],
        cwd: Path,
        *,
        mcp_server: str = "bb-bridge",
        mcp_tools: Sequence[McpTool] = (),
    ) -> None:
        self.argv = list(argv)
        self.cwd = cwd
        self.started_at = time.monotonic()
        self.proc = runner.spawn(self.argv, env, cwd)  # its own process group: close() ends its tools too
        self.mcp_server = mcp_server
        self.mcp_tools = list(mcp_tools)
        self.seen: list[tuple[float, Message]] = []  # (seconds since start, message), every stdout JSON line
        self.sent: list[Message] = []  # every line written to stdin
        self.auto_answered: list[Message] = []  # the CLI's control requests the driver answered itself
        self.skipped: list[str] = []  # stdout lines that were not JSON
        self._inbox: queue.Queue[Message | None] = queue.Queue()
        self._responses: dict[str, Message] = {}
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()
        self._stderr: list[str] = []
        self._ended = False
        self._closed = False
        self._readers = [
            threading.Thread(target=self._read_stdout, name="claude-stdout", daemon=True),
            threading.Thread(target=self._read_stderr, name="claude-stderr", daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @classmethod
    def start(
        cls,
        api_url: str,
        workdir: Path,
        *,
        args: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        mcp_tools: Sequence[McpTool] = (),
    ) -> Claude:
        """The CLI with `launch_args()` (or `args`) in `workdir/ws`, HOME `workdir/home`, talking to `api_url`."""
        home, ws = workdir / "home", workdir / "ws"
        home.mkdir(parents=True, exist_ok=True)
        ws.mkdir(parents=True, exist_ok=True)
        argv = [str(CLAUDE), *(launch_args() if args is None else args)]
        return cls(argv, offline_env(api_url, home, extra=env), ws, mcp_tools=mcp_tools)

    # -- stdin --------------------------------------------------------------------------------------------------

    def send(self, message: Message) -> None:
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n"
        assert self.proc.stdin is not None
        with self._write_lock:
            self.sent.append(message)
            self.proc.stdin.write(line.encode())
            self.proc.stdin.flush()

    def request(self, body: dict[str, Any], timeout: float = 15.0) -> Message:
        """Send a control request (envelope `request_id`, `type`, `request` as the reference orders it) and
        wait for its `control_response`; returns the `response` object (`subtype` success or error)."""
        request_id = uuid.uuid4().hex[:13]
        self.send({"request_id": request_id, "type": "control_request", "request": body})
        deadline = time.monotonic() + timeout
        with self._cond:
            while request_id not in self._responses:
                left = deadline - time.monotonic()
                if left <= 0 or (self._ended and request_id not in self._responses):
                    raise TimeoutError(f"no control_response to {body.get('subtype')} in {timeout}s{self._tail()}")
                self._cond.wait(min(left, 0.1))
            return self._responses[request_id]

    def initialize(self, **options: Any) -> Message:
        """The `initialize` control request (`initialize_request(**options)`); returns the CLI's response body."""
        if self.mcp_tools and "mcp_servers" not in options:
            options["mcp_servers"] = [self.mcp_server]
        response = self.request(initialize_request(**options), timeout=30)
        assert response.get("subtype") == "success", response
        return dict(response.get("response") or {})

    def user(self, text: str, *, session_id: str = "") -> str:
        """A user message line (a turn, or a steer while one runs); returns its uuid."""
        message_uuid = str(uuid.uuid4())
        self.send(
            {
                "type": "user",
                "message": {"role": "user", "content": text},
                "parent_tool_use_id": None,
                "session_id": session_id,
                "uuid": message_uuid,
            }
        )
        return message_uuid

    def respond(self, request_id: str, body: dict[str, Any]) -> None:
        self.send(
            {"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": body}}
        )

    def respond_error(self, request_id: str, error: str) -> None:
        self.send(
            {"type": "control_response", "response": {"subtype": "error", "request_id": request_id, "error": error}}
        )

    def allow(self, request: Message, updated_input: dict[str, Any] | None = None) -> None:
        """Answer a `can_use_tool` control request with allow, as the reference does."""
        inner = request["request"]
        body = {
            "behavior": "allow",
            "updatedInput": inner["input"] if updated_input is None else updated_input,
            "decisionClassification": "user_temporary",
            "toolUseID": inner["tool_use_id"],
        }
        self.respond(request["request_id"], body)

    def deny(
        self, request: Message, message: str = "The user denied this tool call.", *, interrupt: bool = False
    ) -> None:
        """Answer a `can_use_tool` control request with deny."""
        inner = request["request"]
        body: dict[str, Any] = {"behavior": "deny", "message": message}
        if interrupt:
            body["interrupt"] = True
        self.respond(request["request_id"], {**body, "toolUseID": inner["tool_use_id"]})

    def interrupt(self, timeout: float = 15.0) -> Message:
        return self.request({"subtype": "interrupt"}, timeout)

    # -- stdout --------------------------------------------------------------------------------------------------

    def next(self, timeout: float = 15.0) -> Message:
        """The next SDK message or CLI control request not answered automatically (in stdout order)."""
        try:
            message = self._inbox.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no message from the CLI in {timeout}s{self._tail()}") from None
        if message is None:
            self._inbox.put(None)  # stays ended for later reads
            raise CliExited(f"the CLI's stdout ended (exit {self.proc.poll()}){self._tail()}")
        return message

    def wait_for(self, predicate: Callable[[Message], bool], timeout: float = 15.0) -> tuple[Message, list[Message]]:
        """Read until a message satisfies `predicate`; returns it and every message read before it."""
        deadline = time.monotonic() + timeout
        before: list[Message] = []
        while True:
            message = self.next(max(0.0, deadline - time.monotonic()))
            if predicate(message):
                return message, before
            before.append(message)

    def until_result(self, timeout: float = 30.0) -> tuple[Message, list[Message]]:
        """Read until the turn's `result` message; returns it and everything read before it."""
        return self.wait_for(lambda m: m.get("type") == "result", timeout)

    def until_control(self, subtype: str, timeout: float = 15.0) -> tuple[Message, list[Message]]:
        return self.wait_for(
            lambda m: m.get("type") == "control_request" and m["request"].get("subtype") == subtype, timeout
        )

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)[-4000:]

    def _tail(self) -> str:
        last = [json.dumps(m)[:200] for _, m in self.seen[-5:]]
        return f"\nlast stdout messages: {last}\nstderr tail: {self.stderr[-1500:]!r}"

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        try:
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").strip()
                if not line:
                    continue
                try:
                    message = json.loads(line)
                except ValueError:
                    self.skipped.append(line)
                    continue
                if not isinstance(message, dict):
                    self.skipped.append(line)
                    continue
                self.seen.append((time.monotonic() - self.started_at, message))
                self._dispatch(message)
        except (OSError, ValueError):
            pass
        finally:
            with self._cond:
                self._ended = True
                self._cond.notify_all()
            self._inbox.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        with contextlib.suppress(OSError, ValueError):
            for raw in self.proc.stderr:
                self._stderr.append(raw.decode(errors="replace"))
                if len(self._stderr) > 400:
                    del self._stderr[:200]

    def _dispatch(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "control_response":
            response = message.get("response") or {}
            with self._cond:
                self._responses[str(response.get("request_id"))] = response
                self._cond.notify_all()
            return
        if kind == "control_request":
            answered = self._auto_answer(message)
            if answered:
                self.auto_answered.append(message)
                return
        self._inbox.put(message)

    def _auto_answer(self, message: Message) -> bool:
        request_id, inner = str(message.get("request_id")), message.get("request") or {}
        subtype = inner.get("subtype")
        with contextlib.suppress(OSError, ValueError):
            if subtype == "hook_callback":
                self.respond(request_id, {"continue": True})
                return True
            if subtype == "mcp_message":
                if inner.get("server_name") != self.mcp_server or not self.mcp_tools:
                    self.respond_error(request_id, f"SDK MCP server not found: {inner.get('server_name')}")
                else:
                    self.respond(request_id, {"mcp_response": self._mcp(inner.get("message") or {})})
                return True
        return False

    def _mcp(self, rpc: dict[str, Any]) -> dict[str, Any]:
        """The in-process MCP server's reply to one JSON-RPC message (§2.6)."""
        if "id" not in rpc:
            return {"jsonrpc": "2.0", "result": {}, "id": 0}
        method, params = rpc.get("method"), rpc.get("params") or {}
        result: dict[str, Any]
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": self.mcp_server, "version": "1.0.0"},
            }
        elif method == "tools/list":
            result = {
                "tools": [
                    {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                    for t in self.mcp_tools
                ]
            }
        elif method == "tools/call":
            tool = next((t for t in self.mcp_tools if t.name == params.get("name")), None)
            if tool is None:
                result = {"content": [{"type": "text", "text": f"Unknown tool: {params.get('name')}"}], "isError": True}
            else:
                result = {"content": [{"type": "text", "text": tool.result}]}
        elif method == "ping":
            result = {}
        else:
            return {
                "jsonrpc": "2.0",
                "id": rpc["id"],
                "error": {"code": -32601, "message": f"Method not found: {method}"},
            }
        return {"result": result, "jsonrpc": "2.0", "id": rpc["id"]}

    # -- lifecycle -----------------------------------------------------------------------------------------------

    def close(self, grace: float = 5.0) -> int | None:
        """End stdin, give the CLI `grace` seconds to exit, then SIGTERM and SIGKILL its process group.
        Returns the exit status (negative: the signal). Idempotent."""
        if self._closed:
            return self.proc.returncode
        self._closed = True
        return runner.stop(self.proc, self._readers, grace, self._write_lock, term=2)

    def __enter__(self) -> Claude:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
