"""One provider bridge subprocess: spawn, handshake, requests, exit (protocol.md §2, §9).

The process leads its own process group so termination reaches its
children (`wire/process.py`: spawn, stderr tail and stop, as a bridge runs its
own children). Its stdout is the JSON-RPC connection; stderr is logged line by
line and its last 4,000 bytes are kept for error messages.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
import os
import re
import signal
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import msgspec
import structlog
import trio

from bbridge.core.assembler import Assembler
from bbridge.core.event_log import Delivery
from bbridge.core.guard import Guard
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.threads import Piece
from bbridge.daemon.watchdog import Slots, Watchdogs
from bbridge.wire import errors, maintenance, process, protocol, redact, rpc, tee
from bbridge.wire.delta_decoder import DELTA_LINES
from bbridge.wire.lanes import BRIDGE_TO_RUNTIME, RECORD_ENV, RUNTIME_TO_BRIDGE, Recorder, RuntimeScoper

log = structlog.get_logger("bbridge.daemon.bridge")

STDERR_TAIL_BYTES = process.TAIL_BYTES
# What a bridge that fails before its handshake said, for its error line: a few lines, each cut (issue 21).
STARTUP_JUNK_LINES = 3
SAID_LINE_CHARS = 160
STDERR_SAID_LINES = 3
EXIT_GRACE_S = 1.0
TERMINATE_GRACE_S = 5.0  # how long `terminate` waits for the exit after its stop
KILL_GRACE_S = 1.0
# protocol.md §9.4: SIGTERM the leader (the bridge closes its sessions), SIGKILL the group after the provider's
# `stop_grace_s` (this default), then SIGTERM whatever of the group outlived the leader
BRIDGE_STOP = process.StopPlan(grace_s=5.0, kill_wait_s=KILL_GRACE_S, leftovers=signal.SIGTERM)
INITIALIZE_TIMEOUT_S = 30.0
SKILLS_TIMEOUT_S = 30.0  # `skills/configure` (protocol.md §3.3 method table)
PIPE_READ_BYTES = 1 << 16
CLIENT_INFO = {"name": "bbridge", "version": "0.1.0"}

RUNTIME_GRAMMAR = (3, 3)


def bridge_env(
    provider_id: str,
    config: ProviderConfig,
    base: Mapping[str, str],
    record_dir: Path | None,
    redactions: Sequence[redact.Pattern] = (),
) -> dict[str, str]:
    """The environment of protocol.md §9.6, then the provider's own `env` table; in record mode the redaction
    list too, so a kit bridge redacts its provider lanes as the daemon redacts the runtime lanes."""
    env = {k: v for k, v in base.items() if k != "NODE_ENV" and not k.startswith("BB_")}
    for name in config.env_passthrough:
        value = base.get(name)
        if value:
            env[name] = value
    if record_dir is not None:
        env[RECORD_ENV] = str(record_dir / provider_id)
        env[redact.REDACT_ENV] = redact.to_env(redactions)
    else:
        env.pop(RECORD_ENV, None)
    env.update(config.env)
    return env


# `BB_*` names a bridge's text may mention that the runtime sets itself (§9.6: the record dir; the per-thread shell
# identity variables): no user sets them, so no advice names them.
RUNTIME_SET_ENV = frozenset(
    {RECORD_ENV, redact.REDACT_ENV, "BB_PROJECT_ID", "BB_THREAD_STORAGE", "BB_THREAD_ID", "BB_ENVIRONMENT_ID"}
)
_BB_NAME = re.compile(r"\bBB_[A-Z0-9_]+\b")


def stripped_env(base: Mapping[str, str], env: Mapping[str, str]) -> list[str]:
    """The `BB_*` variables of the daemon's environment that the bridge's (`bridge_env`) does not hold."""
    return sorted(name for name in base if name.startswith("BB_") and name not in env)


def env_advice(provider_id: str, names: list[str], stripped: Collection[str]) -> str:
    """How to give a bridge the `BB_*` variables its text asks for: its advice ("set BB_X …, then restart")
    does not work through bbridge, which passes no `BB_*` variable of its own environment (protocol.md §9.6)."""
    removed = [name for name in names if name in stripped]
    table = ", ".join(f'{name} = "..."' for name in names)
    flags = " ".join(f"--env {name}=..." for name in names)
    return (
        "bbridge passes no BB_* variable of its own environment to a bridge"
        + (f" ({' and '.join(removed)} {'was' if len(removed) == 1 else 'were'} set and removed)" if removed else "")
        + f": set {' and '.join(names)} in the provider's env in bbridge.toml ([providers.{provider_id}] env = "
        f"{{ {table} }}) and restart the daemon, or pass `bbridge run {flags}`"
    )


@dataclass
class ExitStatus:
    code: int | None
    signal: int | None

    @classmethod
    def of(cls, returncode: int) -> ExitStatus:
        """From a `returncode` (negative: the signal that ended the process)."""
        return cls(returncode if returncode >= 0 else None, -returncode if returncode < 0 else None)

    def describe(self) -> str:
        if self.signal is not None:
            return f"signal {signal.Signals(self.signal).name}"
        if self.code is not None:
            return f"code {self.code}"
        return "unknown status"


class BridgeHost(Protocol):
    """What a bridge process needs from the daemon (`supervisor.Supervisor`)."""

    @property
    def records(self) -> Slots:
        """Its threads' records, where its watchdogs keep their state."""
        ...

    async def on_notifications(self, bridge: BridgeProcess, batch: list[rpc.Notification]) -> None: ...

    async def on_bridge_request(self, bridge: BridgeProcess, request: rpc.Request) -> Any: ...

    async def on_exit(self, bridge: BridgeProcess, status: ExitStatus) -> None: ...

    async def on_watchdog(self, bridge: BridgeProcess, events: list[dict[str, Any]]) -> None: ...

    def on_status(self, bridge: BridgeProcess) -> None: ...

    def open_delivery(self, bridge: BridgeProcess) -> Delivery: ...


class _PipeReceive(trio.abc.ReceiveStream):
    """A bridge's stdout, read as soon as it is readable: one scheduler pass and one `read` per chunk.

    trio's `FdStream.receive_some` checkpoints and tries a read before it waits, so a pipe that has nothing yet
    (a bridge streaming at a model's pace: ~200 writes a second, each read as it comes) costs two scheduler passes
    and a failed read per chunk, a cost that grows with the number of streaming threads."""

    def __init__(self, pipe: trio.lowlevel.FdStream) -> None:
        self._pipe = pipe

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while True:
            fd = self._pipe.fileno()
            if fd < 0:
                raise trio.ClosedResourceError("the bridge's stdout was closed")
            await trio.lowlevel.wait_readable(fd)  # raises ClosedResourceError if the pipe is closed meanwhile
            try:
                return os.read(fd, max_bytes or PIPE_READ_BYTES)
            except BlockingIOError:
                continue
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    raise trio.ClosedResourceError("the bridge's stdout was closed") from None
                raise trio.BrokenResourceError from exc

    async def aclose(self) -> None:
        await self._pipe.aclose()


class BridgeProcess:
    """A provider's current bridge process, its assembler and its per-process guards."""

    def __init__(
        self,
        provider_id: str,
        config: ProviderConfig,
        host: BridgeHost,
        *,
        record_dir: Path | None = None,
        redactions: Sequence[redact.Pattern] = (),
        text_delta_flush_ms: float = 100,
        entropy_prefix: str | None = None,
        skill_roots: list[maintenance.SkillRoot] | None = None,
    ) -> None:
        self.provider_id = provider_id
        self.skill_roots = skill_roots or []  # what `skills/configure` gave it (sent after `initialize`)
        self.config = config
        self.host = host
        self.record_dir = record_dir
        self.redactions = list(redactions)
        self.state = "starting"
        self.reason: str | None = None
        self.pid: int | None = None
        self.exit: ExitStatus | None = None
        self.capabilities = protocol.Capabilities()
        self.assembler = Assembler(
            provider_id, entropy_prefix, text_delta_flush_ms=text_delta_flush_ms, evict_at_birth=False
        )
        self.guard = Guard()
        self.delivery = host.open_delivery(self)
        self.watchdogs = Watchdogs(
            host.records, config.turn_start_timeout_s, config.turn_stall_timeout_s, self.assembler.heard_at
        )
        self.threads: set[str] = set()
        self.started_at = trio.current_time()
        self.inflight = 0  # its requests not yet answered
        self.last_used = self.started_at  # when it was last handed out, answered a request or let a thread go
        self.stopping = False
        self._proc: trio.Process | None = None
        self._conn: rpc.Connection | None = None
        self._stderr = process.StderrTail(
            0, line_bytes=STDERR_TAIL_BYTES, on_line=lambda line: self._log.info("bridge stderr", line=line)
        )
        self._startup_junk: list[str] | None = []  # non-protocol stdout lines until the handshake succeeds
        self._finished = trio.Event()
        self._stdout_closed = trio.Event()
        self._recorder: Recorder | None = None
        self._scoper = RuntimeScoper()
        self._log = log.bind(providerId=provider_id)
        self.stripped: list[str] = []  # the daemon's BB_* variables this process was not given
        self._given_bb: frozenset[str] = frozenset()  # the BB_* variables it was given
        self.advised: set[tuple[str, tuple[str, ...]]] = set()  # (thread, names) already advised in its timeline

    # -- lifecycle -----------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        """Spawn and handshake; raises RpcError (start failure or refusal) after cleaning up."""
        env = bridge_env(self.provider_id, self.config, os.environ, self.record_dir, self.redactions)
        self.stripped = stripped_env(os.environ, env)
        self._given_bb = frozenset(name for name in env if name.startswith("BB_"))
        if self.stripped:  # names only: a value may be a secret
            self._log.warning(
                "removed BB_* variables from the bridge's environment (protocol.md §9.6); set the ones it needs "
                "in the provider's env in bbridge.toml, or pass them with bbridge run --env NAME=VALUE",
                variables=self.stripped,
            )
        try:
            proc = await process.spawn(self.config.command, env=env, cwd=self.config.cwd)
        except OSError as exc:
            hint = " (is it installed, and on the daemon's PATH or named by its full path?)"
            self._fail(
                f"Provider {self.provider_id!r} failed to start: {exc}{hint if isinstance(exc, FileNotFoundError) else ''}"
            )
            raise rpc.RpcError(errors.BRIDGE_START_FAILED, self.reason or "") from None
        self._proc = proc
        self.pid = proc.pid
        self._log = self._log.bind(pid=proc.pid)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        send: trio.abc.SendStream = proc.stdin
        receive: trio.abc.ReceiveStream = proc.stdout
        if isinstance(receive, trio.lowlevel.FdStream):
            receive = _PipeReceive(receive)
        if self.record_dir is not None:
            redactor = redact.Redactor(self.redactions)
            self._recorder = Recorder(self.record_dir / self.provider_id, redactor=redactor)
            send, receive = tee.tee(
                send,
                receive,
                lambda line: self._tee(RUNTIME_TO_BRIDGE, line),
                lambda line: self._tee(BRIDGE_TO_RUNTIME, line),
            )
        self._conn = rpc.Connection(
            send,
            receive,
            name=f"bridge:{self.provider_id}",
            on_request=self._on_request,
            on_notifications=functools.partial(self.host.on_notifications, self),  # no coroutine of its own a read
            on_junk=self._on_junk,
            typed=DELTA_LINES,
        )
        self.host.on_status(self)
        self._log.info("bridge spawned", command=self.config.command)
        nursery.start_soon(self._read_stdout)
        nursery.start_soon(self._stderr.pump, proc.stderr)
        nursery.start_soon(self._wait_exit)
        nursery.start_soon(self._sweep_watchdogs)
        try:
            await self._handshake()
        except rpc.RpcError as exc:
            failure = self.with_env_advice(exc)
            self._fail(failure.message)
            await self.terminate()
            raise failure from None
        self.state = "ready"
        self._startup_junk = None
        self.host.on_status(self)
        self._log.info("bridge ready", capabilities=msgspec.to_builtins(self.capabilities))

    async def _handshake(self) -> None:
        assert self._conn is not None
        params = {
            "protocolVersion": protocol.PROTOCOL_VERSION,
            "client": CLIENT_INFO,
            "grammarVersions": list(RUNTIME_GRAMMAR),
        }
        try:
            raw = await self._conn.request_raw("initialize", params, timeout=INITIALIZE_TIMEOUT_S)
        except rpc.RpcError as exc:
            if self.exit is not None or isinstance(exc, rpc.ConnectionClosed):
                await self._wait_finished(EXIT_GRACE_S * 2)
                status = self.exit.describe() if self.exit is not None else "unknown status"
                raise rpc.RpcError(
                    errors.BRIDGE_START_FAILED,
                    f"Provider {self.provider_id!r} exited during startup with {status}{self._what_it_said()}",
                ) from None
            failed = (
                f"did not answer initialize within {INITIALIZE_TIMEOUT_S:g}s"
                if isinstance(exc, rpc.RequestTimeout)
                else f"failed its initialize request: {exc.message}"
            )
            raise rpc.RpcError(
                errors.BRIDGE_START_FAILED, f"Provider {self.provider_id!r} {failed}{self._what_it_said()}"
            ) from None
        try:
            self.capabilities = protocol.check_initialize(self.provider_id, bytes(raw))
        except protocol.HandshakeRefused as exc:
            raise rpc.RpcError(errors.HANDSHAKE_REFUSED, str(exc)) from None
        if self.skill_roots:
            await self._configure_skills(self.skill_roots, errors.BRIDGE_START_FAILED)

    async def configure_skills(self, roots: list[maintenance.SkillRoot] | None) -> None:
        """The skill roots that apply to this provider changed since it was given them: send them again."""
        if (roots or []) != self.skill_roots:
            await self._configure_skills(roots or [], errors.SKILLS_REFUSED)

    async def _configure_skills(self, roots: list[maintenance.SkillRoot], code: int) -> None:
        """`skills/configure` (protocol.md §3.3.13): its result is ignored, an error fails the start (or the
        construction that found the roots changed), naming the roots."""
        assert self._conn is not None
        params = msgspec.to_builtins(maintenance.SkillsConfigureParams(roots=roots))
        try:
            await self._conn.request_raw("skills/configure", params, timeout=SKILLS_TIMEOUT_S)
        except rpc.RpcError as exc:
            names = ", ".join(root.id for root in roots) or "none"
            raise rpc.RpcError(
                code,
                f"Provider {self.provider_id!r} refused skills/configure (skill roots: {names}): {exc.message}; "
                "check [skills.roots] in bbridge.toml (`bbridge config check`), or limit the roots' providers",
            ) from None
        self.skill_roots = list(roots)

    def missing_env(self, text: str) -> list[str]:
        """The `BB_*` variables a text of the bridge's names that it was not given and a user may set."""
        found = dict.fromkeys(_BB_NAME.findall(text)) if "BB_" in text else {}
        return [name for name in found if name not in self._given_bb and name not in RUNTIME_SET_ENV]

    def env_advice(self, text: str) -> str | None:
        """Advice beside a text of the bridge's that names `BB_*` variables it was not given (`env_advice`)."""
        names = self.missing_env(text)
        return env_advice(self.provider_id, names, self.stripped) if names else None

    def with_env_advice(self, exc: rpc.RpcError) -> rpc.RpcError:
        """The error, its message followed by the `env_advice` it calls for (the same error when none)."""
        advice = self.env_advice(exc.message)
        return exc if advice is None else rpc.RpcError(exc.code, f"{exc.message} [{advice}]", exc.data)

    def _fail(self, reason: str) -> None:
        self.state = "failed"
        self.reason = reason
        self._log.warning("bridge failed", reason=reason)
        self.host.on_status(self)

    async def _wait_finished(self, timeout: float) -> None:
        with trio.move_on_after(timeout):
            await self._finished.wait()

    def _what_it_said(self) -> str:
        """What the bridge wrote that was not protocol, on the error's one line: its first stray stdout lines
        (before the handshake only) and the last lines of its stderr, each quoted and cut."""
        parts = []
        if self._startup_junk:
            parts.append(f"; its stdout was not JSON-RPC: {quoted(self._startup_junk)}")
        tail = [line for line in self.stderr_tail.splitlines() if line.strip()][-STDERR_SAID_LINES:]
        if tail:
            parts.append(f"; its stderr ended: {quoted(tail)}")
        return "".join(parts)

    @property
    def stderr_tail(self) -> str:
        return self._stderr.text

    async def _read_stdout(self) -> None:
        assert self._conn is not None
        try:
            await self._conn.run()
        finally:
            self._stdout_closed.set()

    async def _wait_exit(self) -> None:
        assert self._proc is not None
        code = await self._proc.wait()
        # exit may precede the last stdout data: give the reader a bounded grace
        with trio.move_on_after(EXIT_GRACE_S):
            await self._stdout_closed.wait()
        if self._conn is not None:
            await self._conn.aclose()
        self.exit = ExitStatus.of(code)
        if self.state != "failed":
            self.state = "exited"
        self._log.log(20 if self.stopping else 30, "bridge exited", status=self.exit.describe(), expected=self.stopping)
        try:
            await self.host.on_exit(self, self.exit)
        finally:
            if self._recorder is not None:
                self._recorder.close()
            self._finished.set()
            self.host.on_status(self)

    async def _sweep_watchdogs(self) -> None:
        interval = self.config.turn_start_sweep_s
        while not self._finished.is_set():
            await trio.sleep(interval)
            if self.state == "ready" and (due := self.watchdogs.sweep(trio.current_time())):
                await self.host.on_watchdog(self, due)

    async def terminate(self, kill_grace: float = KILL_GRACE_S) -> None:
        """Stop the process (`BRIDGE_STOP` with the provider's `stop_grace_s`), then wait for its exit's handling."""
        self.stopping = True
        proc = self._proc
        if proc is None:
            return
        plan = dataclasses.replace(BRIDGE_STOP, grace_s=self.config.stop_grace_s, kill_wait_s=kill_grace)
        await process.stop(proc, plan)
        await self._wait_finished(TERMINATE_GRACE_S)

    # -- its threads ---------------------------------------------------------

    def serves(self, thread_id: str) -> None:
        """The thread is the bridge's (a construction sent to it, its `thread/identity`) until a release."""
        self.threads.add(thread_id)

    def let_go(self, thread_id: str, pieces: frozenset[Piece]) -> None:
        """The bridge's part of a release (`threads.LETS_GO`): the thread's guard state, its sweep and its
        membership (the assembler hears it arrive again at its next notification, if any)."""
        if Piece.GUARD in pieces:
            self.guard.clear_thread(thread_id)
        if Piece.WATCHDOGS in pieces:
            self.watchdogs.forget(thread_id)
        if Piece.MEMBERSHIP in pieces:
            self.threads.discard(thread_id)
            self.assembler.depart(thread_id)
            self.last_used = trio.current_time()

    def turn_dispatched(self, thread_id: str) -> None:
        """A `turn/start` is sent: the turn-start watchdog is armed for the thread."""
        self.watchdogs.turn_dispatched(thread_id, trio.current_time())

    def dispatch_failed(self, thread_id: str) -> None:
        """The `turn/start` failed: nothing is dispatched."""
        self.watchdogs.dispatch_failed(thread_id, trio.current_time())

    def provider_turn(self, thread_id: str, turn_id: str) -> str:
        """A bb turn id of the thread as the provider knows it (itself when the assembler minted none for it)."""
        return self.assembler.get_provider_turn_id(thread_id, turn_id) or turn_id

    def bb_ids(self, thread_id: str, params: dict[str, Any]) -> None:
        """A relayed request's provider-native turn and item ids, made bb ids in place (protocol.md §3.6)."""
        assembler = self.assembler
        turn = params.get("turnId")
        if isinstance(turn, str):
            params["turnId"] = assembler.get_bb_turn_id(thread_id, turn) or turn
        call = params.get("callId")
        if isinstance(call, str):
            params["callId"] = assembler.get_bb_item_id(thread_id, call) or call
        payload = params.get("payload")
        subject = payload.get("subject") if isinstance(payload, dict) else None
        if isinstance(subject, dict) and isinstance(subject.get("itemId"), str):
            subject["itemId"] = assembler.get_bb_item_id(thread_id, subject["itemId"]) or subject["itemId"]

    # -- traffic -------------------------------------------------------------

    def _tee(self, direction: str, line: bytes) -> None:
        if self._recorder is not None:
            self._recorder.record(direction, self._scoper.scope(direction, line), line)

    async def _on_request(self, request: rpc.Request) -> Any:
        return await self.host.on_bridge_request(self, request)

    def _on_junk(self, line: bytes, reason: str) -> None:
        if self._startup_junk is not None and len(self._startup_junk) < STARTUP_JUNK_LINES:
            self._startup_junk.append(line[: SAID_LINE_CHARS * 4].decode("utf-8", errors="replace"))
        self._log.debug("non-protocol bridge output", reason=reason, line=line[:200].decode("utf-8", errors="replace"))

    async def request(
        self,
        method: str,
        params: Any,
        timeout: float | None,
        on_result: Callable[[msgspec.Raw], None] | None = None,
    ) -> msgspec.Raw:
        """Forward one request; daemon-side failures become RpcErrors naming the provider. `on_result` runs as the
        response is read, before the bridge's later notifications (`rpc.Connection.request_raw`)."""
        if self._conn is None or self.state != "ready":
            raise rpc.RpcError(errors.BRIDGE_EXITED, f"Provider {self.provider_id!r} is not running")
        self.inflight += 1
        try:
            return await self._conn.request_raw(method, params, timeout=timeout, on_result=on_result)
        except rpc.RequestTimeout:
            raise rpc.RpcError(
                errors.BRIDGE_TIMEOUT, f"Provider {self.provider_id!r} did not answer {method} within {timeout}s"
            ) from None
        except rpc.ConnectionClosed:
            await self._wait_finished(EXIT_GRACE_S * 2)
            status = self.exit.describe() if self.exit is not None else "unknown status"
            raise rpc.RpcError(
                errors.BRIDGE_EXITED,
                f"Provider {self.provider_id!r} exited unexpectedly ({status}) with {method} in flight"
                + self._what_it_said(),
            ) from None
        finally:
            self.inflight -= 1
            self.last_used = trio.current_time()


def quoted(lines: list[str]) -> str:
    """Lines as JSON strings (escapes keep the message on one line), each cut to `SAID_LINE_CHARS`, ' / ' between."""
    cut = [line.rstrip() if len(line) <= SAID_LINE_CHARS else line[: SAID_LINE_CHARS - 1] + "…" for line in lines]
    return " / ".join(json.dumps(line, ensure_ascii=False) for line in cut)
