"""The real Codex CLI for live tests: where it is, an offline environment, a minimal `codex app-server` driver.

* `installed_cli()` runs `make -s live-agents` (the pinned `@openai/codex`) and returns the native binary; it skips
  the test only when the npm registry is unreachable.
* `offline_env(root, base_url)` makes a temporary HOME and CODEX_HOME whose `config.toml` points codex at a
  scripted Responses API (`tests/live/openai.py`) with a dummy key: nothing leaves the machine.
* `app_server(cli, env, cwd)` spawns `codex app-server` (JSON-RPC 2.0, one JSON object a line on stdio) and yields
  an `AppServer`: `request` with a timeout, `wait_for` a message, every message kept in `messages`, and the server's
  requests (approvals) answered by `answer` (default: `{"decision": decision}`). Every wait is bounded; the process
  group is killed on exit.

The wire shapes (the `initialize` params, `thread/start`, `turn/start`, approval answers) are those the reference
bridge sends in the recorded `bridge→provider` lanes; see `tests/live/CODEX_NOTES.md`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from tests.live import runner
from tests.support import make_or_skip

CODEX_VERSION = "0.171.0"
CLI = runner.LIVE_MODULES / "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
API_KEY_ENV = "SCRIPTED_OPENAI_API_KEY"  # not BB_*: the bridge strips those from codex's environment
MODEL = "gpt-5.5"  # a known model: codex offers exec_command and apply_patch without a warning
CLIENT_INFO = {
    "clientInfo": {"name": "bb", "version": "1.0.0", "title": None},
    "capabilities": {"experimentalApi": True},
}
FULL_ACCESS = {"approvalPolicy": "never", "approvalsReviewer": "user"}
ASK = {"approvalPolicy": "on-request", "approvalsReviewer": "user"}

Json = dict[str, Any]


def installed_cli() -> Path:
    """The pinned codex binary, installed by `make -s live-agents` (skips only when npm's registry is unreachable)."""
    make_or_skip("live-agents", "codex")
    assert CLI.is_file(), f"make live-agents did not install {CLI}"
    return CLI


def config_toml(base_url: str, model: str = MODEL) -> str:
    """A CODEX_HOME config with one custom provider, the scripted server, and no retries, analytics or plugins."""
    return f"""\
model = "{model}"
model_provider = "scripted"

[model_providers.scripted]
name = "scripted"
base_url = "{base_url}"
env_key = "{API_KEY_ENV}"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[features]
plugins = false
"""


def offline_env(root: Path, base_url: str, model: str = MODEL) -> dict[str, str]:
    """A whole environment (nothing inherited): HOME and CODEX_HOME under `root`, the dummy key, a system PATH."""
    home = root / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(config_toml(base_url, model))
    return {
        **runner.offline_env(home),
        "CODEX_HOME": str(codex_home),
        "OPENAI_BASE_URL": base_url,  # the built-in `openai` provider too, should a config ever fall back to it
        API_KEY_ENV: "sk-dummy-offline",
    }


def text_input(text: str) -> list[Json]:
    return [{"type": "text", "text": text, "text_elements": []}]


class CodexError(Exception):
    """An error answer from codex."""

    def __init__(self, method: str, error: Json) -> None:
        super().__init__(f"{method}: {error.get('code')} {error.get('message')}")
        self.code = error.get("code")
        self.message = str(error.get("message"))


@dataclass
class AppServer:
    """One `codex app-server` process: what it said (`messages`, in order) and how to talk to it."""

    proc: trio.Process
    decision: Any = "accept"  # the answer to approval requests, unless `answer` is replaced
    messages: list[Json] = field(default_factory=list)
    stderr: bytearray = field(default_factory=bytearray)
    answer: Callable[[str, Json], Json] | None = None
    _next_id: int = 1
    _changed: trio.Event = field(default_factory=trio.Event)
    _send_lock: trio.Lock = field(default_factory=trio.Lock)

    # -- what was seen ----------------------------------------------------------------------------------------------

    def notifications(self, method: str | None = None) -> list[Json]:
        """Notifications (no id), optionally of one method."""
        return [m for m in self.messages if "id" not in m and "method" in m and method in (None, m["method"])]

    def server_requests(self, method: str | None = None) -> list[Json]:
        """Requests codex sent to us (an id and a method)."""
        return [m for m in self.messages if "id" in m and "method" in m and method in (None, m["method"])]

    def methods(self) -> list[str]:
        """The method of every notification and server request, in order."""
        return [m["method"] for m in self.messages if "method" in m]

    async def wait_for(
        self, method: str, where: Callable[[Json], bool] = lambda _: True, *, since: int = 0, timeout: float = 30
    ) -> Json:
        """The first message of `method` (from index `since`) that `where` accepts; fails after `timeout` seconds."""
        with trio.move_on_after(timeout):
            while True:
                for message in self.messages[since:]:
                    if message.get("method") == method and where(message.get("params") or {}):
                        return message
                await self._changed.wait()
        raise AssertionError(f"no {method} within {timeout}s; seen {self.methods()}; stderr: {self.stderr_tail()}")

    def stderr_tail(self, lines: int = 20) -> str:
        return "\n".join(self.stderr.decode(errors="replace").splitlines()[-lines:])

    # -- talking ----------------------------------------------------------------------------------------------------

    async def send(self, message: Json) -> None:
        assert self.proc.stdin is not None
        async with self._send_lock:
            await self.proc.stdin.send_all(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

    async def request(self, method: str, params: Json | None = None, *, timeout: float = 30) -> Any:
        """Send a request; its `result`, or CodexError for an error answer; fails after `timeout` seconds."""
        request_id, self._next_id = self._next_id, self._next_id + 1
        await self.send({"id": request_id, "method": method, **({"params": params} if params is not None else {})})
        with trio.move_on_after(timeout):
            while True:
                for message in self.messages:
                    if message.get("id") == request_id and "method" not in message:
                        if "error" in message:
                            raise CodexError(method, message["error"])
                        return message.get("result")
                await self._changed.wait()
        raise AssertionError(f"codex did not answer {method} within {timeout}s; stderr: {self.stderr_tail()}")

    async def initialize(self) -> Json:
        """`initialize` with the reference bridge's exact params (no `initialized` notification follows)."""
        result: Json = await self.request("initialize", CLIENT_INFO)
        return result

    async def start_thread(self, cwd: Path, policy: Json = FULL_ACCESS, sandbox: str = "danger-full-access") -> str:
        """`thread/start` as the reference bridge sends it (without bb's instructions and dynamic tools)."""
        params = {**policy, "sandbox": sandbox, "cwd": str(cwd), "model": MODEL, "config": {}}
        result = await self.request("thread/start", {**params, "ephemeral": False, "experimentalRawEvents": True})
        return str(result["thread"]["id"])

    async def start_turn(
        self, thread_id: str, text: str, policy: Json = FULL_ACCESS, sandbox: Json | None = None
    ) -> str:
        """`turn/start`; the codex turn id."""
        params = {"threadId": thread_id, "input": text_input(text), **policy}
        params["sandboxPolicy"] = sandbox or {"type": "dangerFullAccess"}
        result = await self.request("turn/start", {**params, "model": MODEL})
        return str(result["turn"]["id"])

    async def turn_completed(self, turn_id: str, *, timeout: float = 30) -> Json:
        """The `turn/completed` turn object of `turn_id`."""
        done = await self.wait_for("turn/completed", lambda p: p["turn"]["id"] == turn_id, timeout=timeout)
        turn: Json = done["params"]["turn"]
        return turn

    # -- reading ----------------------------------------------------------------------------------------------------

    def _seen(self, message: Json) -> None:
        self.messages.append(message)
        self._changed.set()
        self._changed = trio.Event()

    async def _serve(self, message: Json) -> None:
        """Answer one request from codex: `answer`, else approvals with `decision`, else method-not-found."""
        method, params = str(message["method"]), message.get("params") or {}
        if self.answer is not None:
            await self.send({"id": message["id"], "result": self.answer(method, params)})
        elif method in ("item/commandExecution/requestApproval", "item/fileChange/requestApproval"):
            await self.send({"id": message["id"], "result": {"decision": self.decision}})
        else:
            await self.send({"id": message["id"], "error": {"code": -32601, "message": f"unhandled {method}"}})

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        buffer = b""
        async for chunk in self.proc.stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                try:
                    message = json.loads(line)
                except ValueError:
                    self.stderr += b"[stdout, not JSON] " + line + b"\n"
                    continue
                self._seen(message)
                if "id" in message and "method" in message:
                    await self._serve(message)

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for chunk in self.proc.stderr:
            self.stderr += chunk
            del self.stderr[: max(0, len(self.stderr) - 65536)]


@asynccontextmanager
async def app_server(cli: Path, env: dict[str, str], cwd: Path) -> AsyncIterator[AppServer]:
    """`codex app-server` in its own process group; on exit stdin is closed, then the group killed after 5 s."""
    proc = await trio.lowlevel.open_process(
        [str(cli), "app-server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    server = AppServer(proc)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server._read_stdout)
            nursery.start_soon(server._read_stderr)
            try:
                yield server
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            assert proc.stdin is not None
            await trio.aclose_forcefully(proc.stdin)
            with trio.move_on_after(5):
                await proc.wait()
            runner.kill_group(proc.pid)  # the group: codex's shells and helpers too
            with trio.move_on_after(5):
                await proc.wait()
