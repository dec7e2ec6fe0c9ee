"""One ACP agent process: its launch, its environment, its JSON-RPC connection and its end.

The agent leads its own process group (termination reaches whatever it
spawned), speaks newline-delimited JSON-RPC on stdin/stdout through the same
`rpc.Connection` the daemon uses, and logs on stderr (kept as a short tail for
error messages). Its environment is built from an allowlist (protocol.md §9.4,
§9.6): a few machine basics from the bridge's own environment, the names the
bridge was told to pass, the launch spec's `env`, then the thread's shell
environment; the runtime-only variables never reach it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import structlog
import trio

from bbridge.kit import env_without_runtime
from bbridge.kit.child import Child, StderrTail, StopPlan
from bbridge.wire import rpc

log = structlog.get_logger("bridges.acp")

BASE_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TMPDIR", "TZ",
    "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
)  # fmt: skip
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
STDERR_TAIL_LINES = 40
STOP = StopPlan(grace_s=2.0)  # SIGTERM the agent; after 2 s, SIGKILL its group (whatever it left behind too)
EXIT_GRACE_S = 1.0


@dataclass(frozen=True)
class Launch:
    """How to start an agent: the bridge's command line default, or a request's `acpLaunchSpec`."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None

    @property
    def label(self) -> str:
        return " ".join((self.command, *self.args))


class _LaunchSpec(msgspec.Struct):
    command: str
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None


def launch_from_options(provider_options: Any, default: Launch | None) -> Launch | None:
    """The request's `providerOptions.acpLaunchSpec` when it has a valid one, else the bridge's default."""
    spec = provider_options.get("acpLaunchSpec") if isinstance(provider_options, dict) else None
    if spec is None:
        return default
    try:
        parsed = msgspec.convert(spec, _LaunchSpec)
    except msgspec.ValidationError:
        return default
    if not parsed.command:
        return default
    return Launch(parsed.command, tuple(parsed.args), dict(parsed.env), parsed.cwd)


def agent_env(
    base: Mapping[str, str], passthrough: Sequence[str], launch: Launch, shell: Mapping[str, str] | None
) -> dict[str, str]:
    """The allowlisted environment of an agent (later sources win; names a shell would refuse are dropped)."""
    env = {name: base[name] for name in (*BASE_ENV, *passthrough) if name in base}
    env.update((k, v) for k, v in base.items() if k.startswith("LC_"))
    env.update(launch.env)
    env.update((k, v) for k, v in (shell or {}).items() if ENV_NAME.match(k))
    return env_without_runtime(env)


class _Written(trio.abc.SendStream):
    """Tells waiters when a request for their method has been written (`rpc` writes one message per `send_all`)."""

    def __init__(self, inner: trio.abc.SendStream) -> None:
        self._inner = inner
        self.waiters: list[tuple[bytes, trio.Event]] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._inner.send_all(data)
        head = bytes(data[:256]).lstrip(b"\n")
        for waiter in [w for w in self.waiters if head.startswith(w[0])]:
            self.waiters.remove(waiter)
            waiter[1].set()

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._inner.aclose()


NotificationHandler = Callable[[str, Any], Awaitable[None]]
RequestHandler = Callable[[str, Any], Awaitable[Any]]


class AgentProcess:
    """An agent process and its connection; `start` it (or `run` it in a task), then `request` / `notify`."""

    def __init__(
        self,
        launch: Launch,
        *,
        cwd: str,
        env: Mapping[str, str],
        thread_id: str | None,
        on_notification: NotificationHandler | None = None,
        on_request: RequestHandler | None = None,
    ) -> None:
        self.launch = launch
        self.cwd = cwd
        self.env = dict(env)
        self.thread_id = thread_id
        self.on_notification = on_notification
        self.on_request = on_request
        self.ready = trio.Event()  # the process is spawned (or failed to spawn: `error`)
        self.done = trio.Event()  # the process exited and `on_exit` ran
        self.error: str | None = None
        self.returncode: int | None = None
        self.stopping = False
        self._log = log.bind(agent=launch.command, threadId=thread_id)
        self._child = Child(
            [launch.command, *launch.args],
            env=self.env,
            cwd=cwd,
            thread_id=thread_id,
            tail=StderrTail(STDERR_TAIL_LINES, on_line=lambda line: self._log.debug("agent stderr", line=line)),
        )
        self._conn: rpc.Connection | None = None
        self._written: _Written | None = None

    @property
    def exited(self) -> bool:
        return self.done.is_set() or self._conn is None or self._conn.closed

    async def start(
        self,
        spawn: Callable[..., None],
        on_exit: Callable[[AgentProcess], Awaitable[None]] | None = None,
    ) -> None:
        """`run` the agent in a task `spawn` starts (the bridge's); `RpcError` when it could not be launched."""
        spawn(self.run, on_exit)
        await self.ready.wait()
        if self.error is not None:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, self.error)

    async def run(self, on_exit: Callable[[AgentProcess], Awaitable[None]] | None = None) -> None:
        """Spawn, serve the connection until the process ends, then report; kills the process when cancelled."""
        child = self._child
        try:
            proc = await child.spawn()
        except OSError as exc:
            self.error = f'Failed to launch ACP agent "{self.launch.label}": {exc}'
            self.ready.set()
            self.done.set()
            return
        assert child.stdin is not None and child.stdout is not None
        self._written = _Written(child.stdin)
        self._conn = rpc.Connection(
            self._written,
            child.stdout,
            name=f"acp-agent:{self.launch.command}",
            on_request=self._on_request,
            on_notifications=self._on_notifications,
            default_timeout=None,
        )
        self._log.info("agent spawned", pid=proc.pid, command=self.launch.label)
        self.ready.set()
        try:
            async with trio.open_nursery() as nursery:
                drained = [trio.Event(), trio.Event()]
                nursery.start_soon(_until_done, drained[0], self._conn.run)
                nursery.start_soon(_until_done, drained[1], child.pump_stderr)
                self.returncode = await proc.wait()
                with trio.move_on_after(EXIT_GRACE_S):  # exit may precede the last output (§9.4)
                    for event in drained:
                        await event.wait()
                await self._conn.aclose()
                nursery.cancel_scope.cancel()
            self._log.log(20 if self.stopping else 30, "agent exited", code=self.returncode, expected=self.stopping)
            if on_exit is not None:
                await on_exit(self)
        finally:
            with trio.CancelScope(shield=True):
                await self.terminate()
            self.done.set()

    async def _on_notifications(self, batch: list[rpc.Notification]) -> None:
        if self.on_notification is None:
            return
        for note in batch:
            params = msgspec.json.decode(note.params) if note.params is not None else None
            await self.on_notification(note.method, params)

    async def _on_request(self, request: rpc.Request) -> Any:
        if self.on_request is None:
            raise rpc.RpcError(rpc.METHOD_NOT_FOUND, f'Unsupported ACP client method "{request.method}"')
        params = msgspec.json.decode(request.params) if request.params is not None else None
        return await self.on_request(request.method, params)

    async def request(
        self, method: str, params: Any, *, timeout: float | None = None, sent: trio.Event | None = None
    ) -> Any:
        """One request to the agent; `RpcError` (`ConnectionClosed` when the agent is gone) on failure.

        `sent` is set once the request is on the wire (a prompt's input counts as accepted only then).
        """
        if self._conn is None or self._written is None:
            raise rpc.ConnectionClosed(f'ACP agent "{self.launch.command}" is not running')
        if sent is not None:
            # rpc writes a request as `{"jsonrpc":"2.0","method":<method>,...` (protocol.md §1.1 key order)
            self._written.waiters.append((rpc.encode_notification(method)[:-1], sent))
        return await self._conn.request(method, params, timeout=timeout)

    async def notify(self, method: str, params: Any) -> None:
        if self._conn is not None and not self._conn.closed:
            await self._conn.notify(method, params)

    @property
    def stderr_tail(self) -> list[str]:
        return self._child.stderr.lines

    def exit_message(self) -> str:
        code = "" if self.returncode is None else f" (code {self.returncode})"
        tail = "\n".join(self.stderr_tail).strip()
        return f'ACP agent "{self.launch.label}" exited unexpectedly{code}' + (f": {tail}" if tail else "")

    async def terminate(self) -> None:
        """Stop the agent (`STOP`); its stdin stays open until then."""
        self.stopping = True
        await self._child.stop(STOP, close_stdin=False)


async def _until_done(done: trio.Event, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
    try:
        await fn(*args)
    finally:
        done.set()
