"""The conformance transport and client (protocol.md §7.1): one spawned bridge, one ordered log.

Unlike `rpc.Connection`, the client keeps *every* line the bridge wrote in one
log, in wire order, responses included, because rules are about order (the
identity before the `thread/start` answer, an interrupt's settlement before the
`thread/stop` answer). Each valid `thread/delta` also lands in the log as the
canonical events one assembler (coalescing off) makes of it, stamped and
checked by one grammar guard, as the runtime would see them (the golden `Lane`
instead assembles as the goldens were made: unstamped, fixed clock). Waits are
condition-driven and always bounded; a bridge that exits ends them early.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import msgspec
import structlog
import trio

from bbridge.core import grammar
from bbridge.core.assembler import Assembler
from bbridge.core.events import Event, stamp
from bbridge.core.guard import Guard, Violation
from bbridge.daemon.bridge import (
    BRIDGE_STOP,
    STDERR_SAID_LINES,
    STDERR_TAIL_BYTES,
    ExitStatus,
    bridge_env,
    quoted,
)
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.mistakes import drop_hint
from bbridge.replay.cells import GOLDEN_ENTROPY
from bbridge.wire import framing, process, rpc

log = structlog.get_logger("bbridge.conformance")

Kind = Literal["response", "request", "notification", "event", "invalid-delta", "junk"]
T = TypeVar("T")
REAP_S = 1.0  # how long a bridge whose stdout ended may take to exit before its status is reported unknown
Answerer = Callable[["BridgeClient", dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Lane:
    """How the client assembles `thread/delta`: ids minted, progress throttle, clock, stamping."""

    entropy: str = "cf"
    progress_throttle_ms: float = 0
    fixed_clock: bool = False
    stamped: bool = True


LIVE_LANE = Lane()  # the runtime's live assembly: stamped, wall clock, nothing throttled or coalesced
# The goldens' assembly (golden/README.md): minted prefix `da00000000`, throttle 500 ms, clock 0, unstamped.
GOLDEN_LANE = Lane(GOLDEN_ENTROPY, 500, fixed_clock=True, stamped=False)


@dataclass
class BridgeOutput:
    """One entry of the client's log of what the bridge wrote: a message as the bridge sent it, or an event assembled
    from a `thread/delta`."""

    kind: Kind
    message: Any  # the decoded JSON-RPC message; the event for "event"; the raw text for "junk"
    thread_id: str = ""
    violation: Violation | None = None
    hint: str = ""  # a violation's item in the bridge's words, found as it happened (`mistakes.drop_hint`)
    reason: str = ""  # why an "invalid-delta" was rejected

    @property
    def event(self) -> Event:
        assert self.kind == "event"
        result: Event = self.message
        return result


def _valid_id(value: Any) -> bool:
    return type(value) in (str, int, float)


def _classify(message: Any) -> Kind:
    """protocol.md §1.3: by presence of `method`, never by the shape of `result`."""
    if not isinstance(message, dict):
        return "junk"
    method, has_id = message.get("method"), _valid_id(message.get("id"))
    if has_id and not method:
        return "response"
    if isinstance(method, str) and method:
        return "request" if has_id else "notification"
    return "junk"


async def refuse_requests(client: BridgeClient, request: dict[str, Any]) -> None:
    """No host handlers here (§3.6.3): approvals are denied when deny is offered, everything else is an error."""
    payload = (request.get("params") or {}).get("payload") or {}
    approval = request.get("method") == "interaction/request" and payload.get("kind") == "approval"
    if approval and "deny" in (payload.get("availableDecisions") or []):
        await client.answer(request["id"], result={"decision": "deny"})
        return
    message = f"bbridge conformance has no handler for {request.get('method')!r}"
    await client.answer(request["id"], error={"code": rpc.BRIDGE_ERROR, "message": message})


@dataclass
class BridgeClient:
    """A bridge process under test: write lines, read the ordered log, wait for conditions."""

    command: Sequence[str]
    provider_id: str = "conformance"
    env: Mapping[str, str] = field(default_factory=dict)
    on_request: Answerer = refuse_requests
    lane: Lane = LIVE_LANE
    stderr_limit: int | None = STDERR_TAIL_BYTES  # None keeps all of it
    log: list[BridgeOutput] = field(default_factory=list)
    guard: Guard = field(default_factory=Guard)
    exited: bool = False
    exit_status: ExitStatus | None = None  # known once the process exited after its stdout ended
    stderr_tail: bytearray = field(default_factory=bytearray)

    def __post_init__(self) -> None:
        lane = self.lane
        self.assembler = Assembler(
            self.provider_id, lane.entropy, progress_throttle_ms=lane.progress_throttle_ms, text_delta_flush_ms=0
        )
        self.sent_ids: set[Any] = set()
        self.provider_threads: dict[str, str] = {}  # threadId -> the providerThreadId the bridge reported last
        self._next_id = 0
        self._changed = trio.Event()
        self._last_change = trio.current_time()
        self._stderr_done = trio.Event()
        self._proc: trio.Process | None = None
        self._write_lock = trio.Lock()  # the reader answers bridge requests while a rule writes its own lines

    # -- process ---------------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        """Spawn in its own process group with the runtime's environment rules (protocol.md §9.6)."""
        config = ProviderConfig(command=list(self.command), env=dict(self.env))
        self._proc = await process.spawn(self.command, env=bridge_env(self.provider_id, config, os.environ, None))
        assert self._proc.stdout is not None and self._proc.stderr is not None
        nursery.start_soon(self._read_stdout, self._proc.stdout)
        nursery.start_soon(self._read_stderr, self._proc.stderr)

    async def close(self) -> None:
        """Close the bridge's stdin (its cue to exit), then stop its whole process group."""
        if self._proc is None:
            return
        await self.close_stdin()
        with trio.CancelScope(shield=True):
            await process.stop(self._proc, BRIDGE_STOP)

    async def wait_exit(self, timeout: float) -> bool:
        """Whether the process exited on its own within `timeout`."""
        assert self._proc is not None
        with trio.move_on_after(timeout):
            await self._proc.wait()
            return True
        return False

    async def close_stdin(self) -> None:
        if self._proc is not None and self._proc.stdin is not None:
            await trio.aclose_forcefully(self._proc.stdin)

    @property
    def death_note(self) -> str:
        """Why the bridge's stdout ended, on one line: its exit status, the first lines it wrote to stdout that
        were not JSON-RPC, the last lines of its stderr (each quoted and cut, as the daemon words a failed start)."""
        status = self.exit_status
        said = [f"the bridge exited with {status.describe()}" if status else "the bridge closed its stdout"]
        junk = [str(e.message) for e in self.log if e.kind == "junk"][:STDERR_SAID_LINES]
        if junk:
            said.append(f"its stdout was not JSON-RPC: {quoted(junk)}")
        text = self.stderr_tail.decode("utf-8", errors="replace")
        tail = [line for line in text.splitlines() if line.strip()][-STDERR_SAID_LINES:]
        if tail:
            said.append(f"its stderr ended: {quoted(tail)}")
        return "; ".join(said)

    # -- writing -----------------------------------------------------------------

    async def send_line(self, line: bytes) -> None:
        """One raw line (terminator added); a bridge that stopped reading is noted, not raised."""
        assert self._proc is not None and self._proc.stdin is not None
        async with self._write_lock:
            try:
                await self._proc.stdin.send_all(line + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                log.debug("bridge stopped reading", command=self.command)

    async def request(self, method: str, params: Any, id: str | int | None = None) -> str | int:
        """Send a request (ids are integers from 1 unless given) and return its id."""
        if id is None:
            self._next_id += 1
            id = self._next_id
        self.sent_ids.add(id)
        await self.send_line(rpc.encode_request(method, params, id))
        return id

    async def notify(self, method: str, params: Any) -> None:
        await self.send_line(rpc.encode_notification(method, params))

    async def answer(self, id: Any, *, result: Any = None, error: dict[str, Any] | None = None) -> None:
        body = {"jsonrpc": "2.0", "id": id, **({"error": error} if error is not None else {"result": result})}
        await self.send_line(msgspec.json.encode(body))

    # -- reading -----------------------------------------------------------------

    def _append(self, entry: BridgeOutput) -> None:
        self.log.append(entry)
        self._changed.set()
        self._changed = trio.Event()
        self._last_change = trio.current_time()

    async def _read_stdout(self, stream: trio.abc.ReceiveStream) -> None:
        reader = framing.LineReader()
        try:
            while data := await stream.receive_some():
                for line in reader.feed(data):
                    if isinstance(line, bytes):
                        await self._on_line(line)
            for line in reader.close():
                await self._on_line(line)
            await self._reap()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.exited = True
            self._changed.set()

    async def _reap(self) -> None:
        """Stdout ended, so the process is going: wait a moment for its status and the rest of its stderr, so the
        rules that saw it go can say why (`death_note`)."""
        assert self._proc is not None
        with trio.move_on_after(REAP_S):
            await self._proc.wait()
            await self._stderr_done.wait()
        if self._proc.returncode is not None:
            self.exit_status = ExitStatus.of(self._proc.returncode)

    async def _read_stderr(self, stream: trio.abc.ReceiveStream) -> None:
        try:
            while data := await stream.receive_some():
                self.stderr_tail += data
                if self.stderr_limit is not None:
                    del self.stderr_tail[: -self.stderr_limit]
                log.debug("bridge stderr", text=bytes(data).decode("utf-8", errors="replace").rstrip())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self._stderr_done.set()

    async def _on_line(self, line: bytes) -> None:
        try:
            message = msgspec.json.decode(line)
        except msgspec.DecodeError:
            if line.strip():
                self._append(BridgeOutput("junk", line.decode("utf-8", errors="replace")))
            return
        kind = _classify(message)
        self._append(BridgeOutput(kind, message))
        if kind == "request":
            await self.on_request(self, message)
        elif kind == "notification":
            self._on_notification(message)

    def _on_notification(self, message: dict[str, Any]) -> None:
        params = message.get("params")
        method = message["method"]
        if method == "thread/identity" and isinstance(params, dict):
            tid, ptid = params.get("threadId"), params.get("providerThreadId")
            if isinstance(tid, str) and isinstance(ptid, str):
                self.provider_threads[tid] = ptid
        if method != "thread/delta":
            return
        try:
            batch = grammar.decode_params(msgspec.json.encode(params))
        except grammar.GrammarError as exc:
            self._append(BridgeOutput("invalid-delta", message, reason=str(exc)))
            return
        now = 0 if self.lane.fixed_clock else trio.current_time() * 1000
        for event in self.assembler.assemble(batch.threadId, batch.deltas, now):
            if event["type"] == "thread/identity":
                self.provider_threads[batch.threadId] = event["providerThreadId"]
            if self.lane.stamped:
                stamp(event, batch.threadId, self.provider_threads.get(batch.threadId))
            violation = self.guard.observe(event)
            hint = (
                ""
                if violation is None
                else drop_hint(self.assembler, self.guard, batch.threadId, event, violation.rule)
            )
            self._append(BridgeOutput("event", event, batch.threadId, violation, hint))

    def release(self, thread_id: str) -> None:
        """Forget a detached thread's grammar state (§7.5); unstamped events all share the thread `""`."""
        self.guard.clear_thread(thread_id if self.lane.stamped else "")

    # -- querying ----------------------------------------------------------------

    def mark(self) -> int:
        """The current log position, to look only at what arrives afterwards."""
        return len(self.log)

    def response_index(self, id: Any) -> int | None:
        for index, entry in enumerate(self.log):
            if entry.kind == "response" and entry.message.get("id") == id:
                return index
        return None

    def events(self, start: int = 0, end: int | None = None, *, clean: bool = False) -> list[Event]:
        """Assembled events in order; `clean` keeps only those the live grammar let through."""
        return [e.event for e in self.log[start:end] if e.kind == "event" and (not clean or e.violation is None)]

    def count(self, event_type: str) -> int:
        return sum(1 for e in self.log if e.kind == "event" and e.message["type"] == event_type)

    async def wait_for(self, predicate: Callable[[], T | None], timeout: float) -> T | None:
        """The predicate's first non-None value, or None when `timeout` passes or the bridge's stdout ends first."""
        with trio.move_on_after(timeout):
            while True:
                found = predicate()
                if found is not None or self.exited:
                    return found
                await self._changed.wait()
        return None

    async def wait_response(self, id: Any, timeout: float) -> dict[str, Any] | None:
        index = await self.wait_for(lambda: self.response_index(id), timeout)
        if index is None:
            return None
        message: dict[str, Any] = self.log[index].message
        return message

    async def quiet(self, period: float, limit: float, until: Callable[[], bool] = lambda: False) -> bool:
        """Wait until nothing arrived for `period`, or `until()` holds (bounded by `limit`); whether either happened."""
        with trio.move_on_after(limit):
            while not self.exited and not until():
                remaining = self._last_change + period - trio.current_time()
                if remaining <= 0:
                    return True
                with trio.move_on_after(remaining):
                    await self._changed.wait()
            return True
        return False


async def with_client(command: Sequence[str], body: Callable[[BridgeClient], Awaitable[T]], **kwargs: Any) -> T:
    """Run `body` against a fresh bridge process, then stop its process group whatever happened."""
    async with trio.open_nursery() as nursery:
        client = BridgeClient(command, **kwargs)
        await client.start(nursery)
        try:
            return await body(client)
        finally:
            await client.close()
            nursery.cancel_scope.cancel()


def describe_error(response: dict[str, Any]) -> str:
    error = response.get("error")
    if isinstance(error, dict):
        return f"error {error.get('code')} {str(error.get('message'))[:200]!r}"
    return f"error {msgspec.json.encode(error).decode()[:200]}"
